// Package balloons is the node agent's balloon controller (docs/balloon.md). Each
// pass reads every memory allocation's limits file and region, and per GPU:
//
//   - gives memory back to owners that need it (an allocation waiting in the hook,
//     or usage within half a margin of the lowered cap): from free memory, else by
//     shrinking borrowers' caps to what they use, else by evicting borrowers, lowest
//     priority and youngest first, through the Eviction API;
//   - when the GPU is promised beyond its memory (a borrower arrived), lowers the caps
//     of settled opted-in owners to their floors, largest first, never those of
//     containers that did not opt in and never those of owners a borrower on the GPU
//     outranks;
//   - raises lowered caps back when the memory is free again (a borrower ended);
//   - publishes what is reclaimable per GPU on the node and in metrics.
//
// Everything it decides from is on disk or in the API server (caps, ceilings and
// floors in the limits files, usage and waits in the regions, opt-in and priority on
// the pods), so a restarted agent carries on where the old one stopped; only the
// usage history restarts, which delays new inflations by one settle time.
package balloons

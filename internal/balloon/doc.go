// Package balloon is the memory-balloon policy (docs/balloon.md): how much of an
// opted-in container's reserved GPU memory the node may take back (its floor), when
// it may (it has settled), to whom the freed memory is lent (the ledger: never twice,
// never to a pod that outranks the owner, never beyond the GPU's physical memory) and
// in which order loans are reclaimed when an owner grows back. Pure: no clock, no
// files; the node agent and the simulators feed it observations and carry out its
// decisions.
package balloon

// Package balloon is the memory-balloon policy (docs/balloon.md): how much of an
// opted-in container's reserved GPU memory the node may take back (its floor), when
// it may (it has settled, History) and when an owner must start getting it back
// (ShouldReclaim). Who may borrow from whom is the scheduler's (internal/engine);
// whose cap is lowered, raised and which borrower is evicted is the node agent's
// (internal/monitor/balloons). Pure: no clock, no files; the node agent and the
// simulation feed it observations.
package balloon

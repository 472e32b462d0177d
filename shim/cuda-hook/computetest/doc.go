// Package computetest drives the hook's compute time slices end to end: tenant
// processes (test/tenant.c) under LD_PRELOAD on the simulated GPU, each with
// the core-limits file and core region the device plugin would give its
// container, and the node agent's arbiter (internal/arbiter) running
// in-process over their state directory. Shares are judged by the simulated
// device's own per-process busy time, never by what the hook reports.
package computetest

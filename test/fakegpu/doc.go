// Package fakegpu helps Go tests use the simulated GPU built from this directory
// (libcuda.so.1 and libnvidia-ml.so.1, see docs/fakegpu.md): it finds or builds the
// libraries, predicts the identities the simulated devices report, and reads the
// node-wide state file that every process using the simulated GPU shares.
package fakegpu

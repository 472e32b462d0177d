// Package hooktest drives the CUDA hook (lib/libtessera-hook.so) through the real
// loading paths against the simulated GPU (lib/fakegpu): C programs run under
// LD_PRELOAD, Go orchestrates the processes, kills them and reads the region.
// It has no non-test code besides this comment.
package hooktest

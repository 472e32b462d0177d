// Package balloon will hold the memory-balloon model: reclaiming GPU memory a
// container reserved but does not use, and giving it back when the container
// needs it. Not implemented yet; see the open issues.
package balloon

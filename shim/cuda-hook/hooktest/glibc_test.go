package hooktest

import (
	"path/filepath"
	"testing"

	"github.com/tessera-gpu/tessera/internal/glibcversion"
)

// Baseline is the oldest glibc the hook must load in (manylinux2014's): it is
// preloaded into every program of a container, and one symbol version the
// image's glibc lacks stops every dynamically linked program there
// (include/glibc_baseline.h).
var Baseline = glibcversion.MustParse("GLIBC_2.17")

func TestHookNeedsOnlyBaselineGlibc(t *testing.T) {
	lib := filepath.Join(libDir, "libtessera-hook.so")
	above, err := glibcversion.Above(lib, Baseline)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range above {
		t.Errorf("%s needs %s, newer than the baseline %s", lib, n, Baseline)
	}
}

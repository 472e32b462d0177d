package fakegpu

import (
	"path/filepath"
	"testing"

	"github.com/tessera-gpu/tessera/internal/glibcversion"
)

// The simulated driver stands in for libcuda.so.1 in the same images the hook
// must load in, so it is held to the hook's glibc baseline (manylinux2014).
func TestDriverNeedsOnlyBaselineGlibc(t *testing.T) {
	dir, err := LibDir()
	if err != nil {
		t.Fatal(err)
	}
	baseline := glibcversion.MustParse("GLIBC_2.17")
	for _, name := range []string{"libcuda.so.1", "libnvidia-ml.so.1"} {
		lib := filepath.Join(dir, name)
		above, err := glibcversion.Above(lib, baseline)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range above {
			t.Errorf("%s needs %s, newer than the baseline %s", lib, n, baseline)
		}
	}
}

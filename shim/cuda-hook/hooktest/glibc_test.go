package hooktest

import (
	"debug/elf"
	"path/filepath"
	"strings"
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

// libcBefore234 are the libpthread functions that glibc before 2.34 also
// exports from libc.so.6 at their base version (nptl's forwarders, and
// pthread_atfork through libc_nonshared); every other dl* and pthread_*
// function lived only in libdl.so.2 or libpthread.so.0 there.
var libcBefore234 = map[string]bool{
	"pthread_attr_destroy": true, "pthread_attr_init": true, "pthread_cond_broadcast": true,
	"pthread_cond_destroy": true, "pthread_cond_init": true, "pthread_cond_signal": true, "pthread_cond_wait": true,
	"pthread_cond_timedwait": true, "pthread_equal": true, "pthread_exit": true, "pthread_mutex_destroy": true,
	"pthread_mutex_init": true, "pthread_mutex_lock": true, "pthread_mutex_unlock": true, "pthread_self": true,
	"pthread_setcancelstate": true, "pthread_setcanceltype": true, "pthread_sigmask": true,
}

// TestHookImportsOfLibdlAreWeak: a version check alone passes dlopen bound
// to GLIBC_2.2.5 in libc.so.6, but before glibc 2.34 libc.so.6 has no dlopen
// at all: a strong reference stops every program of an Ubuntu 20.04 or UBI 8
// container that does not link libdl itself (cat, sh). The hook links neither
// libdl nor libpthread (include/glibc_baseline.h), so what only they had must
// be a weak import, checked with dl_available() before use.
func TestHookImportsOfLibdlAreWeak(t *testing.T) {
	lib := filepath.Join(libDir, "libtessera-hook.so")
	f, err := elf.Open(lib)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, s := range syms {
		if s.Section != elf.SHN_UNDEF || elf.ST_TYPE(s.Info) != elf.STT_FUNC && elf.ST_TYPE(s.Info) != elf.STT_NOTYPE {
			continue
		}
		oldLibdl := strings.HasPrefix(s.Name, "dl") && len(s.Name) > 2 && s.Name != "dl_iterate_phdr"
		oldLibpthread := strings.HasPrefix(s.Name, "pthread_") && !libcBefore234[s.Name]
		if !oldLibdl && !oldLibpthread {
			continue
		}
		checked++
		if elf.ST_BIND(s.Info) != elf.STB_WEAK {
			t.Errorf("%s imports %s strongly: before glibc 2.34 only libdl.so.2/libpthread.so.0 have it", lib, s.Name)
		}
	}
	if checked == 0 {
		t.Errorf("%s imports no dl* function: the check above saw nothing (is the hook still resolving the driver with dlopen?)", lib)
	}
}

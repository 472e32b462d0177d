package hooktest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The hook exports dlsym. These programs check that lookups whose meaning depends
// on the caller (RTLD_NEXT, RTLD_DEFAULT from a library opened RTLD_LOCAL) give the
// same answers with and without the hook.
var dlsymSources = map[string]string{
	// liba and libb both define probe; liba asks for the *next* definition. Also
	// under names that look like the driver's but that the hook does not intercept
	// (the CUDA runtime and libraries are cuda*, cublas*, ...; NVML's are nvml*).
	"liba.c": `#include <dlfcn.h>
int probe(void) { return 1; }
int cudaProbe(void) { return 1; }
int nvmlProbe(void) { return 1; }
static int next(const char *name) { int (*f)(void) = (int (*)(void))dlsym(RTLD_NEXT, name); return f ? f() : -1; }
int next_probe(void) { return next("probe") * 100 + next("cudaProbe") * 10 + next("nvmlProbe"); }`,
	"libb.c": `int probe(void) { return 2; }
int cudaProbe(void) { return 2; }
int nvmlProbe(void) { return 2; }`,
	// libplugin is dlopen'ed RTLD_LOCAL and looks up a symbol of its own dependency.
	"libdep.c": `int dep_value(void) { return 7; }`,
	"libplugin.c": `#include <dlfcn.h>
int dep_value(void);
int plugin_lookup(void) { int (*f)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "dep_value"); return f ? f() : -1; }`,
	"main.c": `#include <dlfcn.h>
#include <stdio.h>
int next_probe(void);
int main(void) {
	void *h = dlopen("libplugin.so", RTLD_NOW | RTLD_LOCAL);
	int (*lookup)(void) = h ? (int (*)(void))dlsym(h, "plugin_lookup") : 0;
	printf("next=%d local=%d\n", next_probe(), lookup ? lookup() : -2);
	return 0;
}`,
}

func TestDlsymKeepsCallerRelativeMeaning(t *testing.T) {
	dir := t.TempDir()
	for name, src := range dlsymSources {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gcc := func(args ...string) {
		t.Helper()
		cmd := exec.Command("gcc", args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("gcc %v: %v\n%s", args, err, out)
		}
	}
	gcc("-shared", "-fPIC", "-o", "liba.so", "liba.c", "-ldl")
	gcc("-shared", "-fPIC", "-o", "libb.so", "libb.c")
	gcc("-shared", "-fPIC", "-o", "libdep.so", "libdep.c")
	gcc("-shared", "-fPIC", "-o", "libplugin.so", "libplugin.c", "-L.", "-ldep", "-Wl,-rpath,"+dir, "-ldl")
	gcc("-o", "main", "main.c", "-Wl,--no-as-needed", "-L.", "-la", "-lb", "-Wl,-rpath,"+dir, "-ldl")
	run := func(env ...string) string {
		t.Helper()
		cmd := exec.Command(filepath.Join(dir, "main"))
		cmd.Env = append([]string{"LD_LIBRARY_PATH=" + dir}, env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("main %v: %v\n%s", env, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	plain := run()
	if !strings.HasPrefix(plain, "next=222 ") {
		t.Fatalf("without the hook: %q, want RTLD_NEXT from liba to find libb's probe", plain)
	}
	if hooked := run("LD_PRELOAD=" + filepath.Join(libDir, "libtessera-hook.so")); hooked != plain {
		t.Fatalf("with the hook %q, without %q", hooked, plain)
	}
}

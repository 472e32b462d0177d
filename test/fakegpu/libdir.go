package fakegpu

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
)

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

// LibDir returns the directory holding the simulated libcuda.so.1 and
// libnvidia-ml.so.1: $TESSERA_LIB_DIR/fakegpu when `make test` set it, otherwise
// it builds them once with `make -C <repository root> fakegpu`.
func LibDir() (string, error) {
	if dir := os.Getenv("TESSERA_LIB_DIR"); dir != "" {
		return checkLibDir(filepath.Join(dir, "fakegpu"))
	}
	buildOnce.Do(func() {
		root, err := repoRoot()
		if err != nil {
			buildErr = err
			return
		}
		cmd := exec.Command("make", "-C", root, "fakegpu")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("make -C %s fakegpu: %w\n%s", root, err, out)
			return
		}
		buildDir, buildErr = checkLibDir(filepath.Join(root, "lib", "fakegpu"))
	})
	return buildDir, buildErr
}

var (
	hookOnce sync.Once
	hookDir  string
	hookErr  error
)

// HookLibDir returns the directory holding libtessera-hook.so and fakegpu/
// (the simulated driver): $TESSERA_LIB_DIR when `make test` set it, otherwise
// it builds both once with `make -C <repository root> hook fakegpu`.
func HookLibDir() (string, error) {
	if dir := os.Getenv("TESSERA_LIB_DIR"); dir != "" {
		return dir, nil
	}
	hookOnce.Do(func() {
		root, err := repoRoot()
		if err != nil {
			hookErr = err
			return
		}
		if out, err := exec.Command("make", "-C", root, "hook", "fakegpu").CombinedOutput(); err != nil {
			hookErr = fmt.Errorf("make -C %s hook fakegpu: %w\n%s", root, err, out)
			return
		}
		hookDir = filepath.Join(root, "lib")
	})
	return hookDir, hookErr
}

func checkLibDir(dir string) (string, error) {
	for _, lib := range []string{"libcuda.so.1", "libnvidia-ml.so.1"} {
		if _, err := os.Stat(filepath.Join(dir, lib)); err != nil {
			return "", fmt.Errorf("simulated GPU library missing: %w", err)
		}
	}
	return dir, nil
}

// RepoRoot is the repository checkout this package was compiled from.
func repoRoot() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", fmt.Errorf("cannot locate the fakegpu package source")
	}
	root := filepath.Join(filepath.Dir(file), "..", "..")
	if _, err := os.Stat(filepath.Join(root, "Makefile")); err != nil {
		return "", fmt.Errorf("repository root %s: %w", root, err)
	}
	return root, nil
}

// SourceDir is test/fakegpu in the repository (C sources and test programs).
func SourceDir() (string, error) {
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "test", "fakegpu"), nil
}

// BuildCudash compiles the CUDA test shell (shim/cuda-hook/test/cudash.c)
// into the file dst, linked against the simulated libcuda.so.1 and
// libnvidia-ml.so.1 from LibDir, so that tests drive the hook through it.
func BuildCudash(dst string) error {
	fake, err := LibDir()
	if err != nil {
		return err
	}
	root, err := repoRoot()
	if err != nil {
		return err
	}
	cc := exec.Command("gcc", "-std=c11", "-D_GNU_SOURCE", "-O2", "-Wall", "-Wextra",
		"-I", filepath.Join(root, "shim/cuda-hook/include"), "-o", dst,
		filepath.Join(root, "shim/cuda-hook/test/cudash.c"),
		filepath.Join(fake, "libcuda.so.1"), filepath.Join(fake, "libnvidia-ml.so.1"),
		"-ldl", "-lpthread")
	if out, err := cc.CombinedOutput(); err != nil {
		return fmt.Errorf("build cudash: %w\n%s", err, out)
	}
	return nil
}

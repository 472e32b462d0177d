package imagebuild

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
)

// DefaultLibraryDirs are where Debian-family systems keep shared libraries.
var DefaultLibraryDirs = []string{
	"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu",
	"/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
	"/lib64", "/usr/lib64", "/lib", "/usr/lib",
}

// RuntimeLibraries resolves what the dynamic loader needs to start the
// executables and to load extra: their ELF interpreter (PT_INTERP) and the
// closure of DT_NEEDED sonames, searched in dirs. Paths are returned as
// they are named (an interpreter path that is a symbolic link on this
// machine is kept under its own name; its content is the target's), sorted.
// A statically linked executable needs nothing.
func RuntimeLibraries(executables, extra, dirs []string) ([]string, error) {
	found := map[string]bool{}
	var queue []string
	for _, exe := range executables {
		interp, needed, err := dynamic(exe)
		if err != nil {
			return nil, err
		}
		if interp != "" {
			found[interp] = true
		}
		queue = append(queue, needed...)
	}
	queue = append(queue, extra...)
	seen := map[string]bool{}
	for len(queue) > 0 {
		name := queue[0]
		queue = queue[1:]
		if seen[name] {
			continue
		}
		seen[name] = true
		p, err := findLibrary(name, dirs)
		if err != nil {
			return nil, err
		}
		found[p] = true
		_, needed, err := dynamic(p)
		if err != nil {
			return nil, err
		}
		queue = append(queue, needed...)
	}
	out := make([]string, 0, len(found))
	for p := range found {
		out = append(out, p)
	}
	sort.Strings(out)
	return out, nil
}

// dynamic reads an ELF file's interpreter and needed sonames.
func dynamic(file string) (interp string, needed []string, err error) {
	f, err := elf.Open(file)
	if err != nil {
		return "", nil, fmt.Errorf("%s: %w", file, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err != nil {
				return "", nil, fmt.Errorf("%s: interpreter: %w", file, err)
			}
			interp = string(b[:len(b)-1]) // NUL-terminated
		}
	}
	needed, err = f.ImportedLibraries()
	if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
		return "", nil, fmt.Errorf("%s: needed libraries: %w", file, err)
	}
	return interp, needed, nil
}

func findLibrary(soname string, dirs []string) (string, error) {
	for _, d := range dirs {
		p := filepath.Join(d, soname)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p, nil
		}
	}
	return "", fmt.Errorf("shared library %s not found in %v", soname, dirs)
}

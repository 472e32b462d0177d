// Package glibcversion reads which glibc symbol versions an ELF object needs,
// so that a test can hold a shared library to the oldest glibc it must load in.
// The dynamic loader refuses an object that needs a version (a GNU verneed
// entry) its glibc does not define, whatever the symbol.
package glibcversion

import (
	"debug/elf"
	"fmt"
	"strconv"
	"strings"
)

// Version is a glibc symbol version such as GLIBC_2.17.
type Version struct {
	parts [3]int
}

// Parse reads "GLIBC_2.17" or "GLIBC_2.2.5".
func Parse(s string) (Version, error) {
	rest, ok := strings.CutPrefix(s, "GLIBC_")
	if !ok {
		return Version{}, fmt.Errorf("glibc version %q: no GLIBC_ prefix", s)
	}
	fields := strings.Split(rest, ".")
	if len(fields) < 2 || len(fields) > 3 {
		return Version{}, fmt.Errorf("glibc version %q: want GLIBC_major.minor[.patch]", s)
	}
	var v Version
	for i, f := range fields {
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 {
			return Version{}, fmt.Errorf("glibc version %q: field %d is not a number", s, i+1)
		}
		v.parts[i] = n
	}
	return v, nil
}

// MustParse is Parse for constants.
func MustParse(s string) Version {
	v, err := Parse(s)
	if err != nil {
		panic(err)
	}
	return v
}

// Newer reports whether v is a later version than o.
func (v Version) Newer(o Version) bool {
	for i := range v.parts {
		if v.parts[i] != o.parts[i] {
			return v.parts[i] > o.parts[i]
		}
	}
	return false
}

func (v Version) String() string {
	s := fmt.Sprintf("GLIBC_%d.%d", v.parts[0], v.parts[1])
	if v.parts[2] != 0 {
		s += fmt.Sprintf(".%d", v.parts[2])
	}
	return s
}

// Need is one glibc version an object requires from one library, with the
// symbols it imports at that version (none for a bare verneed entry).
type Need struct {
	Library string
	Version Version
	Symbols []string
}

func (n Need) String() string {
	return fmt.Sprintf("%s from %s (%s)", n.Version, n.Library, strings.Join(n.Symbols, ", "))
}

// Needs lists every GLIBC_* version the object at path requires.
func Needs(path string) ([]Need, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	verneed, err := f.DynamicVersionNeeds()
	if err != nil {
		return nil, fmt.Errorf("%s: version needs: %w", path, err)
	}
	syms, err := f.ImportedSymbols()
	if err != nil {
		return nil, fmt.Errorf("%s: imported symbols: %w", path, err)
	}
	var needs []Need
	for _, lib := range verneed {
		for _, dep := range lib.Needs {
			if !strings.HasPrefix(dep.Dep, "GLIBC_") || dep.Dep == "GLIBC_PRIVATE" {
				continue
			}
			v, err := Parse(dep.Dep)
			if err != nil {
				return nil, fmt.Errorf("%s: needs from %s: %w", path, lib.Name, err)
			}
			n := Need{Library: lib.Name, Version: v}
			for _, s := range syms {
				if s.Library == lib.Name && s.Version == dep.Dep {
					n.Symbols = append(n.Symbols, s.Name)
				}
			}
			needs = append(needs, n)
		}
	}
	return needs, nil
}

// Above lists the versions the object at path needs that are newer than
// baseline.
func Above(path string, baseline Version) ([]Need, error) {
	needs, err := Needs(path)
	if err != nil {
		return nil, err
	}
	var above []Need
	for _, n := range needs {
		if n.Version.Newer(baseline) {
			above = append(above, n)
		}
	}
	return above, nil
}

package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// sharedLibrary returns a shared object of this machine (the C library).
func sharedLibrary(t *testing.T) string {
	for _, p := range []string{"/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libc.so.6", "/lib64/libc.so.6", "/lib/aarch64-linux-gnu/libc.so.6"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Fatal("no libc.so.6 found")
	return ""
}

// TestInstallReplacesByNewInode: a first install creates the file 0755; an
// identical one changes nothing (same inode); a different library replaces
// it by a new inode, so a container holding the old one keeps it.
func TestInstallReplacesByNewInode(t *testing.T) {
	src := sharedLibrary(t)
	dst := filepath.Join(t.TempDir(), "libtessera-hook.so")
	if changed, err := install(src, dst); err != nil || !changed {
		t.Fatalf("first install: changed %v err %v", changed, err)
	}
	fi, _ := os.Stat(dst)
	if fi.Mode().Perm() != 0o755 {
		t.Errorf("mode %v", fi.Mode())
	}
	ino := fi.Sys().(*syscall.Stat_t).Ino
	if changed, err := install(src, dst); err != nil || changed {
		t.Fatalf("same content: changed %v err %v", changed, err)
	}
	if fi, _ := os.Stat(dst); fi.Sys().(*syscall.Stat_t).Ino != ino {
		t.Error("identical install replaced the inode")
	}
	held, _ := os.Open(dst)
	defer held.Close()
	other := filepath.Join(t.TempDir(), "other.so")
	data, _ := os.ReadFile(src)
	if err := os.WriteFile(other, append(data, 0), 0o644); err != nil {
		t.Fatal(err)
	}
	if changed, err := install(other, dst); err != nil || !changed {
		t.Fatalf("new library: changed %v err %v", changed, err)
	}
	if fi, _ := os.Stat(dst); fi.Sys().(*syscall.Stat_t).Ino == ino {
		t.Error("new library written over the inode a container may hold")
	}
	if hs, _ := held.Stat(); hs.Size() != int64(len(data)) {
		t.Errorf("held old file now has %d bytes", hs.Size())
	}
	if _, err := os.Stat(dst + ".tmp"); !os.IsNotExist(err) {
		t.Errorf("temporary file left: %v", err)
	}
}

func TestInstallRefusesWhatLdSoCannotLoad(t *testing.T) {
	dir := t.TempDir()
	text := filepath.Join(dir, "hook.so")
	os.WriteFile(text, []byte("not a library"), 0o644)
	dst := filepath.Join(dir, "out.so")
	if _, err := install(text, dst); err == nil || !strings.Contains(err.Error(), "not an ELF") {
		t.Errorf("text: %v", err)
	}
	if _, err := os.Stat(dst); !os.IsNotExist(err) {
		t.Errorf("a refused file was installed: %v", err)
	}
}

// TestInstallDoesNotFollowALinkAtTheTemporaryName: the installer runs as
// root in a host directory; whatever sits at its temporary name (a link
// left there to any host file, or a stale file of a crashed run) must be
// replaced, never written through.
func TestInstallDoesNotFollowALinkAtTheTemporaryName(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, "libtessera-hook.so")
	if err := os.Symlink(victim, dst+".tmp"); err != nil {
		t.Fatal(err)
	}
	if changed, err := install(sharedLibrary(t), dst); err != nil || !changed {
		t.Fatalf("install: changed %v err %v", changed, err)
	}
	if got, _ := os.ReadFile(victim); string(got) != "keep me" {
		t.Errorf("the link's target was written: %d bytes", len(got))
	}
	if fi, err := os.Lstat(dst); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("%s: %v %v, want a regular file", dst, fi, err)
	}
	want, _ := os.ReadFile(sharedLibrary(t))
	if got, _ := os.ReadFile(dst); string(got) != string(want) {
		t.Error("installed file differs from the source")
	}
}

// TestInstallRefusesAnotherArchitecture: ld.so skips a preload entry of
// another machine with a one-line warning and runs the program without
// it, so a hook built for the wrong architecture would leave every GPU
// container uncapped. The installer runs on the node's architecture (its
// image is per architecture) and refuses a library of another.
func TestInstallRefusesAnotherArchitecture(t *testing.T) {
	data, err := os.ReadFile(sharedLibrary(t))
	if err != nil {
		t.Fatal(err)
	}
	other := byte(62) // EM_X86_64
	if data[18] == 62 {
		other = 183 // EM_AARCH64
	}
	data[18], data[19] = other, 0 // e_machine, little endian
	dir := t.TempDir()
	src := filepath.Join(dir, "foreign.so")
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, "libtessera-hook.so")
	if _, err := install(src, dst); err == nil || !strings.Contains(err.Error(), "machine") {
		t.Errorf("foreign library: %v, want an error naming its machine", err)
	}
	if _, err := os.Stat(dst); !os.IsNotExist(err) {
		t.Errorf("a foreign library was installed: %v", err)
	}
}

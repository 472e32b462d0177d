package cparse

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// wantMount is proc(5)'s mountinfo line format, read independently of the C
// parser: it accepts what the kernel writes and nothing that could be taken
// for another mount.
func wantMount(line string) (MountEntry, bool) {
	f := strings.Split(line, " ")
	if len(f) < 6 {
		return MountEntry{}, false
	}
	num := func(s string, max uint64) (uint64, bool) {
		if s == "" || strings.Trim(s, "0123456789") != "" {
			return 0, false
		}
		v, err := strconv.ParseUint(s, 10, 64)
		return v, err == nil && v <= max
	}
	id, ok1 := num(f[0], 1<<31-1)
	_, ok2 := num(f[1], 1<<31-1)
	maj, min, _ := strings.Cut(f[2], ":")
	major, ok3 := num(maj, 1<<32-1)
	minor, ok4 := num(min, 1<<32-1)
	root, point := unescape(f[3]), unescape(f[4])
	if !ok1 || !ok2 || !ok3 || !ok4 || !strings.HasPrefix(root, "/") || !strings.HasPrefix(point, "/") ||
		strings.ContainsRune(root+point, 0) {
		return MountEntry{}, false
	}
	sep := -1
	for i := 6; i < len(f); i++ {
		if f[i] == "-" {
			sep = i
			break
		}
	}
	if sep < 0 || sep+3 >= len(f) {
		return MountEntry{}, false
	}
	ro := false
	for _, o := range strings.Split(f[5], ",") {
		ro = ro || o == "ro"
	}
	return MountEntry{ID: int(id), Major: uint(major), Minor: uint(minor), ReadOnly: ro,
		Root: root, Point: point}, true
}

func unescape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && s[i+1] >= '0' && s[i+1] <= '3' && s[i+2] >= '0' && s[i+2] <= '7' && s[i+3] >= '0' && s[i+3] <= '7' {
			v, _ := strconv.ParseUint(s[i+1:i+4], 8, 8)
			b.WriteByte(byte(v))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func TestMountinfoOwnProcess(t *testing.T) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	var rootSeen bool
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		got, ok := ParseMountinfoLine(line)
		want, wok := wantMount(line)
		if !ok || !wok || got != want {
			t.Fatalf("%q: parsed %+v %v, want %+v", line, got, ok, want)
		}
		if found, ok := MountinfoFindID(text, got.ID); !ok || found != got {
			t.Errorf("find id %d: %+v %v", got.ID, found, ok)
		}
		if !MountinfoHasPoint(text, got.Point) {
			t.Errorf("has point %q: false", got.Point)
		}
		rootSeen = rootSeen || got.Point == "/"
	}
	if !rootSeen {
		t.Error("no mount at / in this process's mountinfo")
	}
	if MountinfoHasPoint(text, "/no/such/mount/point") {
		t.Error("has point of a path nothing is mounted at")
	}
	if _, ok := MountinfoFindID(text, 1<<30); ok {
		t.Error("found a mount ID nothing has")
	}
}

func TestMountinfoEscapesAndReadOnly(t *testing.T) {
	line := `36 35 98:0 /var/lib/tessera/a\040b/hook.conf /run/tessera/hook.conf ro,relatime shared:1 master:2 - ext4 /dev/root rw,errors=continue`
	got, ok := ParseMountinfoLine(line)
	want := MountEntry{ID: 36, Major: 98, ReadOnly: true, Root: "/var/lib/tessera/a b/hook.conf", Point: "/run/tessera/hook.conf"}
	if !ok || got != want {
		t.Fatalf("parsed %+v %v, want %+v", got, ok, want)
	}
	// "ro" only in the super-block options is a writable mount.
	if got, ok := ParseMountinfoLine(`36 35 98:0 / /x rw,relatime - ext4 /dev/root ro`); !ok || got.ReadOnly {
		t.Fatalf("rw mount of a ro super block: %+v %v", got, ok)
	}
	for _, bad := range []string{"", "36 35 98:0 / /x rw", "36 35 98 / /x rw - ext4 a b", "x 35 98:0 / /x rw - e a b", "36 35 98:0 x /x rw - e a b"} {
		if got, ok := ParseMountinfoLine(bad); ok {
			t.Errorf("%q accepted as %+v", bad, got)
		}
	}
}

// FuzzMountinfoLine: arbitrary lines never crash the C parser, which accepts
// exactly what proc(5)'s format does and reads the same fields from it.
func FuzzMountinfoLine(f *testing.F) {
	if data, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		f.Add(strings.SplitN(string(data), "\n", 2)[0])
	}
	f.Add(`36 35 98:0 /var/lib/tessera/ld.so.preload//deleted /etc/ld.so.preload ro,relatime - ext4 /dev/root rw`)
	f.Add(`1 0 0:1 /a\134b /c\011d ro,nosuid shared:7 - tmpfs tmpfs ro`)
	f.Add(`4294967296 1 1:1 / / ro - x y z`)
	f.Fuzz(func(t *testing.T, line string) {
		if strings.ContainsAny(line, "\x00\n") || strings.Contains(line, "  ") || strings.HasPrefix(line, " ") || strings.HasSuffix(line, " ") {
			return // the kernel writes single spaces and escapes the rest
		}
		for _, field := range strings.Split(line, " ") {
			if len(field) >= 4096 {
				return // longer than PATH_MAX: the C parser refuses it, by design
			}
		}
		got, ok := ParseMountinfoLine(line)
		want, wok := wantMount(line)
		if ok != wok || got != want {
			t.Fatalf("%q: C %+v %v, contract %+v %v", line, got, ok, want, wok)
		}
	})
}

// wantHookConf is docs/hook.md's hook.conf contract.
func wantHookConf(text string) (HookConf, bool) {
	c := HookConf{LogLevel: 1}
	if strings.ContainsRune(text, 0) {
		return c, false
	}
	for _, line := range strings.Split(text, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		if len(line) >= 128 {
			return c, false
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return c, false
		}
		switch k {
		case "log":
			l, known := map[string]int{"error": 0, "warn": 1, "info": 2, "debug": 3}[v]
			if !known {
				return c, false
			}
			c.LogLevel = l
		case "ctx-reserve-mib":
			if v == "" || strings.Trim(v, "0123456789") != "" {
				return c, false
			}
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil || n > 1<<20 {
				return c, false
			}
			c.CtxReserveBytes = n << 20
		default:
			return c, false
		}
	}
	return c, true
}

func TestHookConf(t *testing.T) {
	for _, c := range []struct {
		text string
		want HookConf
		err  string
	}{
		{"# tessera\nlog=info\nctx-reserve-mib=512\n", HookConf{CtxReserveBytes: 512 << 20, LogLevel: 2}, ""},
		{"", HookConf{LogLevel: 1}, ""},
		{"log=loud\n", HookConf{}, "line 1 log"},
		{"\nlimits=/tmp/x\n", HookConf{}, `line 2: unknown key "limits"`},
		{"ctx-reserve-mib\n", HookConf{}, "line 1: \"ctx-reserve-mib\" is not key=value"},
	} {
		got, err := ParseHookConf(c.text)
		if c.err == "" && (err != nil || got != c.want) {
			t.Errorf("%q: %+v %v, want %+v", c.text, got, err, c.want)
		}
		if c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
			t.Errorf("%q: error %v, want one containing %q", c.text, err, c.err)
		}
	}
}

func FuzzHookConf(f *testing.F) {
	f.Add("# c\nlog=debug\nctx-reserve-mib=1048576\n")
	f.Add("log=warn\nlog=error")
	f.Add("ctx-reserve-mib=1048577\n")
	f.Add("=\n#\n\n")
	f.Fuzz(func(t *testing.T, text string) {
		got, err := ParseHookConf(text)
		want, ok := wantHookConf(text)
		if (err == nil) != ok || (ok && got != want) {
			t.Fatalf("%q: C %+v %v, contract %+v %v", text, got, err, want, ok)
		}
	})
}

// TestMountinfoHasRoot: the hook tells the plugin's mounts by their source
// wherever an image symlink made the runtime put them.
func TestMountinfoHasRoot(t *testing.T) {
	text := "1 0 8:1 / / rw - ext4 /dev/sda1 rw\n" +
		"40 1 8:2 /lib/tessera/ld.so.preload /run/x/preload ro - ext4 /dev/sda2 rw\n" +
		"41 1 8:2 /lib/tessera/containers/mem-1/limits//deleted /run/x/limits ro - ext4 /dev/sda2 rw\n" +
		"42 1 0:5 /run/tessera/region /run/tessera/region rw - tmpfs tmpfs rw\n" +
		"43 1 8:3 /region /srv/region rw - ext4 /dev/sda3 rw\n"
	for _, c := range []struct {
		dir          string
		anyDir       bool
		major, minor uint
		name         string
		want         bool
	}{
		{"", true, 0, 0, "ld.so.preload", true},
		{"", true, 0, 0, "preload", false},
		{"/lib/tessera", false, 8, 2, "limits", true}, // "//deleted" ignored
		{"/lib/tessera", false, 8, 2, "core-limits", false},
		{"/lib/tessera", false, 8, 3, "limits", false}, // another filesystem
		{"/lib/tess", false, 8, 2, "limits", false},    // a prefix that is not a directory
		{"/lib/tessera", false, 0, 5, "region", false}, // tmpfs: not the anchor's
		{"", false, 8, 3, "region", true},              // the anchor at the filesystem's root
		{"/lib/tessera", false, 8, 2, "ld.so.preload", true},
	} {
		if got := MountinfoHasRoot(text, c.dir, c.anyDir, c.major, c.minor, c.name); got != c.want {
			t.Errorf("has root %q under %q (any %v) on %d:%d = %v, want %v", c.name, c.dir, c.anyDir, c.major, c.minor, got, c.want)
		}
	}
}

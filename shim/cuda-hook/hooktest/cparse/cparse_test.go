package cparse

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// wantConfig is the contract of docs/hook.md, written independently of the C parser.
func wantConfig(set map[string]string) (Config, bool) {
	c := Config{LogLevel: 1}
	if v, ok := set["TESSERA_LOG"]; ok {
		i := map[string]int{"error": 0, "warn": 1, "info": 2, "debug": 3}
		l, known := i[v]
		if !known {
			return Config{}, false
		}
		c.LogLevel = l
	}
	for name, dst := range map[string]*string{"TESSERA_REGION": &c.Region, "TESSERA_LIMITS": &c.Limits,
		"TESSERA_CORE_LIMITS": &c.CoreLimits} {
		if v, ok := set[name]; ok {
			if v == "" || len(v) >= 4096 {
				return Config{}, false
			}
			*dst = v
		}
	}
	if v, ok := set["TESSERA_CTX_RESERVE_MIB"]; ok {
		if v == "" || strings.Trim(v, "0123456789") != "" {
			return Config{}, false
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n > 1<<20 {
			return Config{}, false
		}
		c.CtxReserveBytes = n << 20
	}
	if c.Limits != "" && c.Region == "" {
		return Config{}, false
	}
	return c, true
}

var names = []string{"TESSERA_LOG", "TESSERA_REGION", "TESSERA_LIMITS", "TESSERA_CORE_LIMITS", "TESSERA_CTX_RESERVE_MIB"}

func check(t *testing.T, set map[string]string) {
	t.Helper()
	var env []string
	for k, v := range set {
		env = append(env, k+"="+v)
	}
	got, err := ParseConfig(env)
	want, ok := wantConfig(set)
	switch {
	case ok && err != nil:
		t.Fatalf("%v: rejected (%v), the contract accepts it", set, err)
	case !ok && err == nil:
		t.Fatalf("%v: accepted as %+v, the contract rejects it", set, got)
	case ok && got != want:
		t.Fatalf("%v: parsed %+v, want %+v", set, got, want)
	case !ok && !strings.Contains(err.Error(), "TESSERA_"):
		t.Fatalf("%v: error %q names no variable", set, err)
	}
}

func TestConfigContract(t *testing.T) {
	for _, set := range []map[string]string{
		{},
		{"TESSERA_REGION": "/r", "TESSERA_LIMITS": "/l", "TESSERA_CTX_RESERVE_MIB": "0512", "TESSERA_LOG": "info"},
		{"TESSERA_CTX_RESERVE_MIB": "1048576", "TESSERA_REGION": "/r"},
		{"TESSERA_CTX_RESERVE_MIB": "1048577"},
		{"TESSERA_CTX_RESERVE_MIB": "18446744073709551617"},
		{"TESSERA_CTX_RESERVE_MIB": " 5"},
		{"TESSERA_LOG": "DEBUG"},
		{"TESSERA_LIMITS": "/l"},
		{"TESSERA_CORE_LIMITS": ""},
	} {
		check(t, set)
	}
}

// FuzzConfig holds the C parser to the contract for arbitrary values; mask says
// which variables are set (an empty value is different from an unset one).
func FuzzConfig(f *testing.F) {
	f.Add(uint8(0x1f), "debug", "/run/r", "/run/l", "/run/c", "300")
	f.Add(uint8(0x10), "", "", "", "", "12x")
	f.Add(uint8(0x04), "warn", "", "/l", "", "")
	f.Add(uint8(0x11), "loud", "", "", "", "99999999")
	f.Fuzz(func(t *testing.T, mask uint8, log, region, limits, core, reserve string) {
		set := map[string]string{}
		for i, v := range []string{log, region, limits, core, reserve} {
			if strings.ContainsRune(v, 0) {
				return // not representable in an environment
			}
			if mask&(1<<i) != 0 {
				set[names[i]] = v
			}
		}
		check(t, set)
	})
}

func TestParseStatOwnProcess(t *testing.T) {
	data, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		t.Fatal(err)
	}
	start, zombie, ok := ParseStat(string(data))
	fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
	want, _ := strconv.ParseUint(fields[19], 10, 64)
	if !ok || zombie || start != want {
		t.Fatalf("ParseStat = %d %v %v, want %d", start, zombie, ok, want)
	}
	if _, z, ok := ParseStat("9 (a) b) Z 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 1 18 424242 0"); !ok || !z {
		t.Fatal("a zombie with ') ' in its name was not recognised")
	}
	// A leader that called pthread_exit: state Z, but 3 threads still run.
	if _, z, ok := ParseStat("9 (a) Z 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 3 18 424242 0"); !ok || z {
		t.Fatal("a zombie leader with live threads was taken for an exited process")
	}
}

// FuzzParseStat: arbitrary /proc/<pid>/stat text never crashes the C parser, and
// what it accepts has a digit start time and the state it reports.
func FuzzParseStat(f *testing.F) {
	if data, err := os.ReadFile("/proc/self/stat"); err == nil {
		f.Add(string(data))
	}
	f.Add("1 (init) S 0 1 1 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 5 0 0")
	f.Add("7 ()) Z")
	f.Add("7 (x) R 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 99999999999999999999999")
	f.Fuzz(func(t *testing.T, line string) {
		start, zombie, ok := ParseStat(line)
		if !ok {
			return
		}
		if i := strings.IndexByte(line, 0); i >= 0 {
			line = line[:i] // C sees the text up to the first NUL
		}
		rest := line[strings.LastIndexByte(line, ')')+2:]
		fields := strings.Split(rest, " ")
		if exited := (rest[0] == 'Z' || rest[0] == 'X') && (fields[17] == "0" || fields[17] == "1"); zombie != exited {
			t.Fatalf("%q: zombie %v", line, zombie)
		}
		digits := fields[19][:len(fields[19])-len(strings.TrimLeft(fields[19], "0123456789"))]
		if v, err := strconv.ParseUint(digits, 10, 64); err != nil || v != start {
			t.Fatalf("%q: start %d, field 22 is %q", line, start, fields[19])
		}
	})
}

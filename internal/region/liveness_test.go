package region

import (
	"os"
	"os/exec"
	"testing"
)

func TestProcessAlive(t *testing.T) {
	data, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		t.Fatal(err)
	}
	_, start, _, ok := parseStat(data)
	if !ok || start == 0 {
		t.Fatalf("parseStat(/proc/self/stat) = %d, %v", start, ok)
	}
	self := uint32(os.Getpid())
	if !ProcessAlive(self, start) || !ProcessAlive(self, 0) {
		t.Error("this process reported dead")
	}
	if ProcessAlive(self, start+1) {
		t.Error("a different start time (pid reuse) reported alive")
	}
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if ProcessAlive(uint32(cmd.Process.Pid), 0) {
		t.Error("an exited, reaped child reported alive")
	}
}

func TestParseStatOddCommandNames(t *testing.T) {
	line := "42 (a) b) (c) S 1 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10\n"
	state, start, threads, ok := parseStat([]byte(line))
	if !ok || state != 'S' || start != 987654 || threads != 1 {
		t.Fatalf("got %c %d %d %v", state, start, threads, ok)
	}
	for _, bad := range []string{"", "42 (x", "42 (x) S 1 2", "42 (x) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 zz"} {
		if _, _, _, ok := parseStat([]byte(bad)); ok {
			t.Errorf("%q parsed", bad)
		}
	}
}

func FuzzParseStat(f *testing.F) {
	f.Add([]byte("1 (init) S 0 1 1 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 5 0 0\n"))
	f.Add([]byte("7 ()) Z"))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _, _, _ = parseStat(data)
	})
}

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	testNodes = "../../internal/placement/testdata/openb/openb_node_list_gpu_node.csv"
	testPods  = "../../internal/placement/testdata/openb/openb_pod_list_default.csv"
)

func runCLI(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = dispatch(args, &o, &e)
	return code, o.String(), e.String()
}

func TestSimulateCSV(t *testing.T) {
	out := t.TempDir()
	code, stdout, stderr := runCLI("simulate", "--nodes", testNodes, "--pods", testPods, "--policy", "fgd",
		"--seeds", "42,43", "--tune", "1.3", "--format", "csv", "--out", out)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != 7 || !strings.Contains(lines[0], "arrived_pct") || !strings.Contains(lines[0], "unalloc_pct_median") {
		t.Fatalf("csv output:\n%s", stdout)
	}
	if !strings.HasPrefix(lines[3], "fgd,100.000,") {
		t.Errorf("row for 100%% arrival: %q", lines[3])
	}
	files, _ := filepath.Glob(filepath.Join(out, "*.csv"))
	if len(files) != 2 {
		t.Fatalf("--out kept %d run files, want 2", len(files))
	}
	b, _ := os.ReadFile(filepath.Join(out, "fgd-seed42.csv"))
	if !bytes.HasPrefix(b, []byte("pod,arrived_milli,allocated_milli,frag_milli,placed")) || bytes.Count(b, []byte("\n")) < 8000 {
		t.Errorf("per-run file: %.100s", b)
	}
}

func TestSimulateSeveralPoliciesAndLevels(t *testing.T) {
	code, stdout, stderr := runCLI("simulate", "--nodes", testNodes, "--pods", testPods, "--policy", "fgd,tessera",
		"--seeds", "42", "--levels", "95,100", "--format", "csv")
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if code != 0 || len(lines) != 5 || !strings.HasPrefix(lines[1], "fgd,95.000,") || !strings.HasPrefix(lines[4], "tessera,100.000,") {
		t.Fatalf("exit %d, stdout:\n%s\nstderr: %s", code, stdout, stderr)
	}
	if code, _, stderr := runCLI("simulate", "--nodes", testNodes, "--pods", testPods, "--levels", "100,x"); code == 0 || !strings.Contains(stderr, "not a percentage") {
		t.Fatalf("bad level accepted: %s", stderr)
	}
}

func TestSimulateTable(t *testing.T) {
	code, stdout, stderr := runCLI("simulate", "--nodes", testNodes, "--pods", testPods, "--policy", "tessera", "--seeds", "42")
	if code != 0 || !strings.Contains(stdout, "arrived_%") || strings.Count(stdout, "\n") != 8 {
		t.Fatalf("exit %d, stdout:\n%s\nstderr: %s", code, stdout, stderr)
	}
}

func TestSimulateBadInput(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "pods.csv")
	os.WriteFile(bad, []byte("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,1,2000\n"), 0o644)
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"simulate", "--nodes", testNodes, "--pods", bad}, `pods.csv:2: field gpu_milli="2000": out of range`},
		{[]string{"simulate", "--nodes", testNodes}, "--nodes and --pods are required"},
		{[]string{"simulate", "--nodes", testNodes, "--pods", testPods, "--policy", "magic"}, `unknown policy "magic"`},
		{[]string{"simulate", "--nodes", testNodes, "--pods", testPods, "--seeds", "9-1"}, "want a range"},
		{[]string{"simulate", "--nodes", testNodes, "--pods", testPods, "--format", "xml"}, "want table or csv"},
		{[]string{"simulate", "--nodes", testNodes, "--pods", testPods, "--node-order", "sorted"}, "want shuffled or file"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
	}
	for _, c := range cases {
		code, _, stderr := runCLI(c.args...)
		if code == 0 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q, want %q", c.args, code, stderr, c.want)
		}
	}
}

func TestParseSeeds(t *testing.T) {
	got, err := parseSeeds("42-51")
	if err != nil || len(got) != 10 || got[0] != 42 || got[9] != 51 {
		t.Fatalf("42-51: %v %v", got, err)
	}
	got, err = parseSeeds("1, 5,9")
	if err != nil || len(got) != 3 || got[1] != 5 {
		t.Fatalf("list: %v %v", got, err)
	}
	for _, bad := range []string{"", "a", "1-x", "3-2", "1,,2"} {
		if _, err := parseSeeds(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestBenchWithoutOpenBDirSaysSo(t *testing.T) {
	code, stdout, stderr := runCLI("bench", "--openb-dir", filepath.Join(t.TempDir(), "absent"),
		"--shipped", "../../internal/placement/testdata/openb", "--seeds", "42", "--policies", "fgd", "--throughput=false", "--dynamic=false")
	if code != 0 || !strings.Contains(stderr, "is absent") || !strings.Contains(stdout, "BENCH sched.openb.default.fgd.unalloc_pct ") {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	for _, l := range strings.Split(strings.TrimSpace(stdout), "\n") {
		if f := strings.Fields(l); len(f) != 4 || f[0] != "BENCH" {
			t.Errorf("not a BENCH line: %q", l)
		}
	}
}

// The short dynamic run: every mode, the BENCH metrics the issue names, and
// bad flags refused with the flag named.
func TestSimulateDynamicShort(t *testing.T) {
	podLog := filepath.Join(t.TempDir(), "pods")
	code, stdout, stderr := runCLI("simulate", "--mode", "dynamic", "--nodes", testNodes, "--pods", testPods,
		"--horizon", "40m", "--warmup", "10m", "--drain", "2h", "--format", "bench", "--pod-log", podLog)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, m := range []string{"fifo", "priority_noaging", "full"} {
		b, err := os.ReadFile(podLog + "." + m + ".csv")
		if lines := strings.Count(string(b), "\n"); err != nil || !strings.HasPrefix(string(b), "mode,pod,class,") || lines < 2 {
			t.Errorf("pod log of %s: %v, %d lines", m, err, lines)
		}
	}
	for _, m := range []string{"fifo", "priority_noaging", "full"} {
		for _, metric := range []string{"p0_wait_p99_s", "p1_wait_p99_s", "p3_wait_max_s", "gpu_alloc_mean_pct", "preemptions", "min_run_violations 0 "} {
			if !strings.Contains(stdout, "BENCH sched.dynamic."+m+"."+metric) {
				t.Errorf("no BENCH sched.dynamic.%s.%s", m, metric)
			}
		}
	}
	for _, metric := range []string{"completed_gain_pct", "wait_p99_ratio", "owner_oom_pct", "mem_used_pct_off", "mem_used_pct_on",
		"mem_idle_pct_off", "mem_lendable_pct_on", "mem_lent_pct_on", "borrowers_over_compute_pct"} {
		if !strings.Contains(stdout, "BENCH balloon."+metric+" ") {
			t.Errorf("no BENCH balloon.%s", metric)
		}
	}
	// Compute-bound balloons (the default, as the engine places borrowers)
	// place no borrower beyond its GPU's compute.
	if !strings.Contains(stdout, "BENCH balloon.borrowers_over_compute_pct 0.0 %") {
		t.Errorf("default (compute-bound) balloons placed borrowers beyond compute:\n%s", stdout)
	}
	code, stdout, stderr = runCLI("simulate", "--mode", "dynamic", "--nodes", testNodes, "--pods", testPods, "--modes", "fifo",
		"--horizon", "40m", "--warmup", "10m", "--drain", "2h", "--format", "bench", "--balloon-compute=false")
	if code != 0 || !strings.Contains(stdout, "BENCH balloon.borrowers_over_compute_pct") {
		t.Errorf("--balloon-compute=false: exit %d, %s\n%s", code, stderr, stdout)
	}
	for _, bad := range []struct{ flag, value, want string }{
		{"--load", "0", "load 0"}, {"--deadline", "P9=1h", "--deadline"}, {"--modes", "lifo", `mode "lifo"`}, {"--warmup", "5h", "--warmup"},
		{"--age-join", "first", "--age-join"},
	} {
		code, _, stderr := runCLI("simulate", "--mode", "dynamic", "--nodes", testNodes, "--pods", testPods, "--horizon", "2h", bad.flag, bad.value)
		if code == 0 || !strings.Contains(stderr, bad.want) {
			t.Errorf("%s %s: exit %d, %s", bad.flag, bad.value, code, stderr)
		}
	}
}

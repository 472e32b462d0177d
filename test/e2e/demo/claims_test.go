package demo

import (
	"bytes"
	"strings"
	"testing"
)

// TestAccountClaimsFollowTheMeasurements: the account's verdicts come from
// the numbers, not from the wording: a GPU holding more than its
// containers' caps is reported (and fails the demo), and tessera doing
// worse than the published FGD is said as such.
func TestAccountClaimsFollowTheMeasurements(t *testing.T) {
	line, err := gpuHolds(0, 24*gib, 24*gib)
	if err != nil || !strings.Contains(line, "GPU 0 holds 24.0 GiB in all (NVML") || !strings.Contains(line, "within the 24.0 GiB") {
		t.Errorf("at the caps: %q, %v", line, err)
	}
	line, err = gpuHolds(1, 25*gib, 24*gib)
	if err == nil || !strings.Contains(line, "MORE than the 24.0 GiB") {
		t.Errorf("past the caps: %q, %v; want a failure that says so", line, err)
	}
	for _, c := range []struct {
		tessera float64
		want    string
	}{
		{3.90, "tessera leaves 0.87 pp less GPU unallocated than the published FGD"},
		{5.00, "tessera leaves 0.23 pp MORE GPU unallocated than the published FGD"},
		{4.77, "tessera leaves as much GPU unallocated as the published FGD"},
	} {
		var b bytes.Buffer
		(&Account{Form: "reduced", OpenB: &OpenB{Trace: "t", Seeds: 2, Arrival: 100, FGD: 4.8, Tessera: c.tessera, Published: 4.77, PublishedFrom: "p.csv"}}).Print(&b)
		if !strings.Contains(b.String(), c.want+" (p.csv)") {
			t.Errorf("tessera %.2f vs published 4.77: account\n%s\nlacks %q", c.tessera, b.String(), c.want)
		}
	}
}

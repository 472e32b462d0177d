package v1

import (
	"strings"
	"testing"
)

func TestNodeBalloonsAndBorrowedRoundTrip(t *testing.T) {
	n := &NodeBalloons{Version: Version, GPUs: []GPUBalloon{{UUID: "GPU-a", ReclaimableMiB: 12288, LentMiB: 4096, Owners: 2}}}
	s, err := Marshal(n)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseNodeBalloons(s)
	if err != nil || got.GPUs[0] != n.GPUs[0] {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	b := &Borrowed{Version: Version, GPUs: []BorrowedGPU{{UUID: "GPU-a", MemoryMiB: 4096, From: []string{"ns/owner/main"}}}}
	if s, err = Marshal(b); err != nil {
		t.Fatal(err)
	}
	if got, err := ParseBorrowed(s); err != nil || got.GPUs[0].From[0] != "ns/owner/main" {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
}

func TestBalloonAnnotationsReject(t *testing.T) {
	for _, tc := range []struct{ in, field string }{
		{`{"version":"v2","gpus":[]}`, "version"},
		{`{"version":"v1","gpus":[{"uuid":"GPU-a","reclaimableMiB":1},{"uuid":"GPU-a","reclaimableMiB":1}]}`, "gpus[1].uuid"},
		{`{"version":"v1","gpus":[{"uuid":"GPU-a","reclaimableMiB":1,"owners":-1}]}`, "gpus[0].owners"},
		{`{"version":"v1","gpus":[{"uuid":"GPU-a","reclaimableMiB":1,"extra":1}]}`, "unknown field"},
	} {
		if _, err := ParseNodeBalloons(tc.in); err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: err = %v, want one naming %s", tc.in, err, tc.field)
		}
	}
	for _, tc := range []struct{ in, field string }{
		{`{"version":"v1","gpus":[{"uuid":"GPU-a","memoryMiB":0}]}`, "gpus[0].memoryMiB"},
		{`{"version":"v1","gpus":[{"uuid":"GPU-a","memoryMiB":1,"from":[""]}]}`, "gpus[0].from[0]"},
		{`{"version":"v1","gpus":[{"uuid":"","memoryMiB":1}]}`, "gpus[0].uuid"},
	} {
		if _, err := ParseBorrowed(tc.in); err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: err = %v, want one naming %s", tc.in, err, tc.field)
		}
	}
	if !OptedIn(map[string]string{BalloonKey: "true"}) || OptedIn(map[string]string{BalloonKey: "True"}) || OptedIn(nil) {
		t.Error("opt-in is exactly \"true\"")
	}
}

func FuzzParseNodeBalloons(f *testing.F) {
	f.Add(`{"version":"v1","gpus":[{"uuid":"GPU-a","reclaimableMiB":1024,"lentMiB":2,"owners":1}]}`)
	f.Add(`{"version":"v1","gpus":[]}`)
	f.Fuzz(func(t *testing.T, s string) { roundTrip[NodeBalloons](t, s, ParseNodeBalloons) })
}

func FuzzParseBorrowed(f *testing.F) {
	f.Add(`{"version":"v1","gpus":[{"uuid":"GPU-a","memoryMiB":1024,"from":["ns/p/c"]}]}`)
	f.Fuzz(func(t *testing.T, s string) { roundTrip[Borrowed](t, s, ParseBorrowed) })
}

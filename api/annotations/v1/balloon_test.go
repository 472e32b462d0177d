package v1

import (
	"reflect"
	"strings"
	"testing"
)

func TestNodeBalloonsAndBorrowedRoundTrip(t *testing.T) {
	n := &NodeBalloons{Version: Version, GPUs: []GPUBalloon{{UUID: "GPU-a", ReclaimableMiB: 12288, LentMiB: 4096, Owners: 2,
		Lenders: []Lender{{Owner: "ns/owner/main", CeilingMiB: 20480, FloorMiB: 8192, LentMiB: 4096, WantsBackMiB: 1024}}}}}
	s, err := Marshal(n)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseNodeBalloons(s)
	if err != nil || !reflect.DeepEqual(got.GPUs, n.GPUs) || got.GPUs[0].Lenders[0].Pod() != "ns/owner" {
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
		{`{"version":"v1","gpus":[{"uuid":"GPU-a","lenders":[{"owner":"ns/pod","ceilingMiB":2}]}]}`, "gpus[0].lenders[0].owner"},
		{`{"version":"v1","gpus":[{"uuid":"GPU-a","lenders":[{"owner":"ns/p/c","ceilingMiB":2,"floorMiB":3}]}]}`, "gpus[0].lenders[0].floorMiB"},
		{`{"version":"v1","gpus":[{"uuid":"GPU-a","lenders":[{"owner":"ns/p/c","ceilingMiB":2,"lentMiB":3}]}]}`, "gpus[0].lenders[0].lentMiB"},
		{`{"version":"v1","gpus":[{"uuid":"GPU-a","lenders":[{"owner":"ns/p/c","ceilingMiB":4,"lentMiB":1,"wantsBackMiB":2}]}]}`, "gpus[0].lenders[0].wantsBackMiB"},
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
	f.Add(`{"version":"v1","gpus":[{"uuid":"GPU-a","lenders":[{"owner":"ns/p/c","ceilingMiB":4096,"floorMiB":1024,"lentMiB":2048,"wantsBackMiB":512}]}]}`)
	f.Fuzz(func(t *testing.T, s string) { roundTrip[NodeBalloons](t, s, ParseNodeBalloons) })
}

func FuzzParseBorrowed(f *testing.F) {
	f.Add(`{"version":"v1","gpus":[{"uuid":"GPU-a","memoryMiB":1024,"from":["ns/p/c"]}]}`)
	f.Fuzz(func(t *testing.T, s string) { roundTrip[Borrowed](t, s, ParseBorrowed) })
}

package preferred

import (
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	corev1 "k8s.io/api/core/v1"

	annotations "github.com/tessera-gpu/tessera/api/annotations/v1"
	configv1 "github.com/tessera-gpu/tessera/api/config/v1"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/ledger"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/resource"
	"github.com/tessera-gpu/tessera/internal/gpu"
	"github.com/tessera-gpu/tessera/internal/gpu/gputest"
)

// migFixture: a DGX H100 whose GPU 3 has two 3-slice MIG devices.
func migFixture(t *testing.T) (*Chooser, string, []annotations.MIGAllocation, *[]string) {
	t.Helper()
	node := gputest.MustNew(gputest.DGXH100)
	uuids, err := node.EnableMIG(3, nvml.GPU_INSTANCE_PROFILE_3_SLICE, nvml.GPU_INSTANCE_PROFILE_3_SLICE)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	gpus, err := gpu.Discover(node, log)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := resource.NewManager(gpus, resource.Options{SplitCount: 4, MemoryUnit: 1 << 30, MIG: true})
	var warned []string
	c := &Chooser{Manager: m, Ledger: ledger.New(), Policy: configv1.PlacementBinpack, Log: log,
		Warn: func(_ *corev1.Pod, reason, msg string) { warned = append(warned, reason+": "+msg) }}
	profile := gpus[3].MIG[0].Profile
	var devs []annotations.MIGAllocation
	for _, u := range uuids {
		devs = append(devs, annotations.MIGAllocation{UUID: u, Profile: profile, Parent: gpus[3].UUID})
	}
	return c, resource.MIGResource(profile), devs, &warned
}

func migKey(d annotations.MIGAllocation) string {
	return resource.ID{GPU: d.Parent, Kind: resource.KindMIG, MIG: d.UUID}.String()
}

func assignedPod(t *testing.T, res string, n int64, mig []annotations.MIGAllocation) *corev1.Pod {
	t.Helper()
	p := pendingPod("p", "c", map[string]int64{res: n})
	raw, err := annotations.Marshal(&annotations.Assignment{Version: annotations.Version, Containers: []annotations.ContainerAssignment{{Name: "c", MIG: mig}}})
	if err != nil {
		t.Fatal(err)
	}
	p.Annotations = map[string]string{annotations.AssignmentKey: raw}
	return p
}

// TestPreferredMIGFollowsAssignment: the device the assignment names is
// proposed even where the local policy would take the other one.
func TestPreferredMIGFollowsAssignment(t *testing.T) {
	c, res, devs, warned := migFixture(t)
	avail := []string{migKey(devs[0]), migKey(devs[1])}
	local := c.Preferred(res, avail, nil, 1)
	if len(local) != 1 {
		t.Fatalf("local choice %v", local)
	}
	other := devs[0]
	if local[0] == migKey(devs[0]) {
		other = devs[1]
	}
	c.Pods = staticSource{assignedPod(t, res, 1, []annotations.MIGAllocation{other})}
	if ids := c.Preferred(res, avail, nil, 1); len(ids) != 1 || ids[0] != migKey(other) {
		t.Fatalf("assignment of %s answered %v", other.UUID, ids)
	}
	c.Ledger = ledger.New()
	c.Pods = staticSource{assignedPod(t, res, 2, devs)}
	if ids := c.Preferred(res, avail, nil, 2); len(ids) != 2 || !contains(ids, migKey(devs[0])) || !contains(ids, migKey(devs[1])) {
		t.Fatalf("assignment of both devices answered %v", ids)
	}
	if len(*warned) != 0 {
		t.Fatalf("warned %v", *warned)
	}
}

// TestPreferredMIGFallsBack: an assignment the plugin cannot honour is
// logged and reported on the pod, and the local policy still answers with
// a device kubelet offers.
func TestPreferredMIGFallsBack(t *testing.T) {
	both := func(d []annotations.MIGAllocation) []string { return []string{migKey(d[0]), migKey(d[1])} }
	cases := []struct {
		name  string
		mig   func(d []annotations.MIGAllocation) []annotations.MIGAllocation
		avail func(d []annotations.MIGAllocation) []string
		want  string
	}{
		{"device not on the node", func(d []annotations.MIGAllocation) []annotations.MIGAllocation {
			x := d[1]
			x.UUID = "MIG-00000000-0000-0000-0000-000000000000"
			return []annotations.MIGAllocation{x}
		}, both, "does not advertise"},
		{"wrong parent GPU", func(d []annotations.MIGAllocation) []annotations.MIGAllocation {
			x := d[1]
			x.Parent = "GPU-elsewhere"
			return []annotations.MIGAllocation{x}
		}, both, "does not advertise"},
		{"device not free", func(d []annotations.MIGAllocation) []annotations.MIGAllocation { return d[1:] },
			func(d []annotations.MIGAllocation) []string { return []string{migKey(d[0])} }, "not free"},
		{"count differs", func(d []annotations.MIGAllocation) []annotations.MIGAllocation { return d }, both, "names 2 MIG devices"},
		{"malformed annotation", nil, both, "profile"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, res, devs, warned := migFixture(t)
			var p *corev1.Pod
			if tc.mig != nil {
				p = assignedPod(t, res, 1, tc.mig(devs))
			} else {
				p = pendingPod("p", "c", map[string]int64{res: 1})
				p.Annotations = map[string]string{annotations.AssignmentKey: `{"version":"v1","containers":[{"name":"c","mig":[{"uuid":"x","parent":"y"}]}]}`}
			}
			c.Pods = staticSource{p}
			avail := tc.avail(devs)
			ids := c.Preferred(res, avail, nil, 1)
			if len(ids) != 1 || !contains(avail, ids[0]) {
				t.Fatalf("fallback answered %v, want one of %v", ids, avail)
			}
			if len(*warned) != 1 || !strings.Contains((*warned)[0], tc.want) || !strings.Contains((*warned)[0], "TesseraAssignmentUnusable") {
				t.Fatalf("warnings %v, want one naming %q", *warned, tc.want)
			}
		})
	}
}

// FuzzPreferredMIGAssignment: whatever the assignment annotation says, a
// mig-<profile> answer is at most size distinct IDs kubelet offered, and
// an answer other than the assigned devices comes with a warning.
func FuzzPreferredMIGAssignment(f *testing.F) {
	c, res, devs, warned := migFixture(&testing.T{})
	avail := []string{migKey(devs[0]), migKey(devs[1])}
	for _, mig := range [][]annotations.MIGAllocation{devs[:1], devs, {{UUID: "MIG-x", Profile: devs[0].Profile, Parent: devs[0].Parent}}} {
		raw, _ := annotations.Marshal(&annotations.Assignment{Version: annotations.Version, Containers: []annotations.ContainerAssignment{{Name: "c", MIG: mig}}})
		f.Add(raw, 1)
	}
	f.Add(`{"version":"v1","containers":[{"name":"c","mig":[{"uuid":"x"}]}]}`, 1)
	f.Add(`{"version":"v1","containers":[{"name":"c","gpus":[{"uuid":"GPU-1"}]}]}`, 2)
	f.Fuzz(func(t *testing.T, raw string, size int) {
		size = 1 + size&1 // 1 or 2
		c.Ledger = ledger.New()
		*warned = nil
		p := pendingPod("p", "c", map[string]int64{res: int64(size)})
		p.Annotations = map[string]string{annotations.AssignmentKey: raw}
		c.Pods = staticSource{p}
		ids := c.Preferred(res, avail, nil, size)
		if len(ids) > size {
			t.Fatalf("%d IDs for size %d", len(ids), size)
		}
		seen := map[string]bool{}
		for _, id := range ids {
			if !contains(avail, id) || seen[id] {
				t.Fatalf("answered %v of %v", ids, avail)
			}
			seen[id] = true
		}
		a, err := annotations.ParseAssignment(raw)
		if err != nil {
			if len(*warned) != 1 {
				t.Fatalf("malformed assignment %q: warnings %v", raw, *warned)
			}
			return
		}
		if ca := a.Container("c"); ca != nil && len(ca.MIG) > 0 && len(*warned) == 0 {
			for _, id := range ids {
				found := false
				for _, m := range ca.MIG {
					found = found || migKey(m) == id
				}
				if !found {
					t.Fatalf("answer %s not assigned and no warning", id)
				}
			}
		}
	})
}

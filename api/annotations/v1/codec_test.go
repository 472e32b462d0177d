package v1

import (
	"reflect"
	"strings"
	"testing"
)

func sampleAssignment() *Assignment {
	return &Assignment{Version: Version, Containers: []ContainerAssignment{
		{Name: "init", GPUs: []GPUShare{{UUID: "GPU-a", MemoryMiB: 1024}}},
		{Name: "main", GPUs: []GPUShare{{UUID: "GPU-a", MemoryMiB: 8192, CorePercent: 30}, {UUID: "GPU-b", MemoryMiB: 8192, CorePercent: 30}}},
	}}
}

func TestAssignmentRoundTrip(t *testing.T) {
	in := sampleAssignment()
	s, err := Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := ParseAssignment(s)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip changed the value:\n in=%+v\nout=%+v", in, out)
	}
	if c := out.Container("main"); c == nil || len(c.GPUs) != 2 {
		t.Fatalf("Container(main) = %+v", c)
	}
	if out.Container("nope") != nil {
		t.Fatal("Container(nope) should be nil")
	}
}

func TestAllocatedAndNodeGPUsRoundTrip(t *testing.T) {
	al := &Allocated{Version: Version, Containers: []ContainerAllocation{{
		Name: "c", GPUs: []GPUAllocation{{UUID: "GPU-a", MemoryMiB: 2048, CorePercent: 50, Slots: 1}},
		MIG: []MIGAllocation{{UUID: "MIG-x", Profile: "1g.18gb", Parent: "GPU-b"}},
	}}}
	s, err := Marshal(al)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseAllocated(s)
	if err != nil || !reflect.DeepEqual(al, got) {
		t.Fatalf("allocated round trip: %v %+v", err, got)
	}
	ng := &NodeGPUs{Version: Version, GPUs: []NodeGPU{{UUID: "GPU-a", Index: 0, Model: "H200", MemoryMiB: 143771, SMCount: 132, NUMANode: -1, NVLinkPeers: []string{"GPU-b"}, Healthy: true,
		MIGEnabled: true, MIG: []MIGInstance{{UUID: "MIG-1", Profile: "1g.18gb", MemoryMiB: 16384}}}}}
	s, err = Marshal(ng)
	if err != nil {
		t.Fatal(err)
	}
	gotN, err := ParseNodeGPUs(s)
	if err != nil || !reflect.DeepEqual(ng, gotN) {
		t.Fatalf("node-gpus round trip: %v %+v", err, gotN)
	}
}

func TestParseAssignmentRejects(t *testing.T) {
	cases := map[string]struct{ in, want string }{
		"not json":        {`{`, "malformed JSON"},
		"trailing":        {`{"version":"v1","containers":[{"name":"a","gpus":[{"uuid":"GPU-a"}]}]} x`, "after top-level value"},
		"unknown field":   {`{"version":"v1","containers":[],"extra":1}`, `unknown field "extra"`},
		"version":         {`{"version":"v2","containers":[{"name":"a","gpus":[{"uuid":"GPU-a"}]}]}`, "version: unsupported"},
		"no containers":   {`{"version":"v1","containers":[]}`, "containers: empty"},
		"no name":         {`{"version":"v1","containers":[{"gpus":[{"uuid":"GPU-a"}]}]}`, "containers[0].name: empty"},
		"dup name":        {`{"version":"v1","containers":[{"name":"a","gpus":[{"uuid":"GPU-a"}]},{"name":"a","gpus":[{"uuid":"GPU-a"}]}]}`, "containers[1].name: duplicate"},
		"no gpus":         {`{"version":"v1","containers":[{"name":"a","gpus":[]}]}`, "containers[0].gpus: empty"},
		"empty uuid":      {`{"version":"v1","containers":[{"name":"a","gpus":[{"uuid":""}]}]}`, "containers[0].gpus[0].uuid: empty"},
		"bad uuid":        {`{"version":"v1","containers":[{"name":"a","gpus":[{"uuid":"GPU-a::mem::1"}]}]}`, "containers[0].gpus[0].uuid: invalid"},
		"dup gpu":         {`{"version":"v1","containers":[{"name":"a","gpus":[{"uuid":"GPU-a"},{"uuid":"GPU-a"}]}]}`, "containers[0].gpus[1].uuid: duplicate"},
		"core too large":  {`{"version":"v1","containers":[{"name":"a","gpus":[{"uuid":"GPU-a","corePercent":101}]}]}`, "containers[0].gpus[0].corePercent: 101 exceeds 100"},
		"negative mem":    {`{"version":"v1","containers":[{"name":"a","gpus":[{"uuid":"GPU-a","memoryMiB":-1}]}]}`, "malformed JSON"},
		"key case":        {`{"version":"v1","Containers":[{"name":"a","gpus":[{"uuid":"GPU-a"}]}]}`, `unknown field "Containers"`},
		"duplicate key":   {`{"version":"v1","version":"v1","containers":[{"name":"a","gpus":[{"uuid":"GPU-a"}]}]}`, `duplicate field "version"`},
		"nested key case": {`{"version":"v1","containers":[{"name":"a","gpus":[{"uuid":"GPU-a","memorymib":1024}]}]}`, `unknown field "containers[0].gpus[0].memorymib"`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := ParseAssignment(tc.in)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ParseAssignment(%s) error = %v, want it to contain %q", tc.in, err, tc.want)
			}
			if !strings.HasPrefix(err.Error(), AssignmentKey) {
				t.Fatalf("error %q does not name the annotation", err)
			}
		})
	}
}

func TestMarshalRefusesInvalid(t *testing.T) {
	a := sampleAssignment()
	a.Version = ""
	if _, err := Marshal(a); err == nil {
		t.Fatal("Marshal accepted an assignment without version")
	}
	n := &NodeGPUs{Version: Version, GPUs: []NodeGPU{{UUID: "GPU-a", NUMANode: -2}}}
	if _, err := Marshal(n); err == nil || !strings.Contains(err.Error(), "gpus[0].numaNode") {
		t.Fatalf("Marshal(node) error = %v", err)
	}
}

// roundTrip checks that whatever the parser accepts survives a re-encode.
func roundTrip[T any, P interface {
	*T
	Validate() error
}](t *testing.T, s string, parse func(string) (*T, error)) {
	v, err := parse(s)
	if err != nil {
		return
	}
	out, err := Marshal(P(v))
	if err != nil {
		t.Fatalf("accepted value does not re-marshal: %v (input %q)", err, s)
	}
	v2, err := parse(out)
	if err != nil {
		t.Fatalf("re-encoded value does not parse: %v (%q)", err, out)
	}
	// Compared by canonical encoding: an empty list and an absent one mean the
	// same ("gpus":[] re-encodes without the field and parses back as nil).
	out2, err := Marshal(P(v2))
	if err != nil || out2 != out {
		t.Fatalf("round trip changed the value: %q vs %q (%v)", out, out2, err)
	}
}

func FuzzParseAssignment(f *testing.F) {
	s, _ := Marshal(sampleAssignment())
	f.Add(s)
	f.Add(`{"version":"v1","containers":[{"name":"a","gpus":[{"uuid":"GPU-a","corePercent":100}]}]}`)
	f.Add(`{"version":"v1","containers":null}`)
	f.Add(`[]`)
	f.Add(`{"version":"v1","containers":[{"name":"a","gpus":null,"mig":[{"uuid":"MIG-1","profile":"1g.10gb","parent":"GPU-a"}]}]}`)
	f.Add(`{"version":"v1","containers":[{"name":"a","gpus":[],"mig":[{"uuid":"MIG-1","profile":"1g.10gb","parent":"GPU-a"},{"uuid":"MIG-1","profile":"1g.10gb","parent":"GPU-a"}]}]}`)
	f.Fuzz(func(t *testing.T, s string) {
		roundTrip[Assignment](t, s, ParseAssignment)
	})
}

func FuzzParseAllocated(f *testing.F) {
	f.Add(`{"version":"v1","containers":[{"name":"c","gpus":[{"uuid":"GPU-a","memoryMiB":1024,"slots":1}],"mig":[{"uuid":"MIG-1","profile":"1g.18gb","parent":"GPU-a"}]}]}`)
	f.Add(`{"version":"v1","containers":[]}`)
	f.Fuzz(func(t *testing.T, s string) {
		roundTrip[Allocated](t, s, ParseAllocated)
	})
}

func FuzzParseNodeGPUs(f *testing.F) {
	f.Add(`{"version":"v1","gpus":[{"uuid":"GPU-a","index":0,"model":"H200","memoryMiB":1,"numaNode":-1,"migEnabled":false,"healthy":true}]}`)
	f.Fuzz(func(t *testing.T, s string) {
		roundTrip[NodeGPUs](t, s, ParseNodeGPUs)
	})
}

// An assignment may name MIG devices (added within v1): one written before
// them still parses the same, one with them round-trips, and a bad MIG
// entry is refused with its field named.
func TestAssignmentMIG(t *testing.T) {
	old := `{"version":"v1","containers":[{"name":"a","gpus":[{"uuid":"GPU-a","memoryMiB":1024,"corePercent":50}]}]}`
	a, err := ParseAssignment(old)
	if err != nil || len(a.Containers[0].MIG) != 0 || a.Containers[0].GPUs[0].CorePercent != 50 {
		t.Fatalf("pre-MIG assignment: %+v, %v", a, err)
	}
	if out, err := Marshal(a); err != nil || out != old {
		t.Errorf("pre-MIG assignment re-encoded as %q, %v", out, err)
	}
	mig := `{"version":"v1","containers":[{"name":"a","gpus":null,"mig":[{"uuid":"MIG-4b1a","profile":"3g.40gb","parent":"GPU-a"}]}]}`
	a, err = ParseAssignment(mig)
	if err != nil || len(a.Containers[0].MIG) != 1 || a.Containers[0].MIG[0].Profile != "3g.40gb" || a.Containers[0].MIG[0].Parent != "GPU-a" {
		t.Fatalf("MIG assignment: %+v, %v", a, err)
	}
	if out, err := Marshal(a); err != nil || out != mig {
		t.Errorf("MIG assignment re-encoded as %q, %v", out, err)
	}
	for _, c := range []struct{ in, field string }{
		{`{"version":"v1","containers":[{"name":"a","gpus":null}]}`, "containers[0].gpus: empty (and no mig devices)"},
		{`{"version":"v1","containers":[{"name":"a","gpus":null,"mig":[{"uuid":"","profile":"1g.5gb","parent":"GPU-a"}]}]}`, "containers[0].mig[0].uuid"},
		{`{"version":"v1","containers":[{"name":"a","gpus":null,"mig":[{"uuid":"MIG-1","profile":"1g.5gb","parent":""}]}]}`, "containers[0].mig[0].parent"},
		{`{"version":"v1","containers":[{"name":"a","gpus":null,"mig":[{"uuid":"MIG-1","profile":"","parent":"GPU-a"}]}]}`, "containers[0].mig[0].profile"},
		{`{"version":"v1","containers":[{"name":"a","gpus":null,"mig":[{"uuid":"MIG-1","profile":"1g.5gb","parent":"GPU-a"},{"uuid":"MIG-1","profile":"1g.5gb","parent":"GPU-a"}]}]}`, "containers[0].mig[1].uuid: duplicate"},
		{`{"version":"v1","containers":[{"name":"a","gpus":null,"mig":[{"uuid":"MIG-1","profile":"1g.5gb","parent":"GPU-a","extra":1}]}]}`, "unknown field"},
	} {
		if _, err := ParseAssignment(c.in); err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: err = %v, want it to name %q", c.in, err, c.field)
		}
	}
}

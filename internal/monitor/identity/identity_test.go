package identity

import (
	"context"
	"errors"
	"testing"

	"github.com/tessera-gpu/tessera/internal/deviceplugin/allocation"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/resource"
)

func TestKeysFollowTheDevicePluginsDirectoryNames(t *testing.T) {
	mem := []string{"GPU-a::mem::3", "GPU-a::mem::1", "GPU-b::mem::0"}
	core := []string{"GPU-a::core::7"}
	owner := Owner{Namespace: "ns", Pod: "p", Container: "c"}
	keys := Keys([]Listing{
		{Owner: owner, Devices: map[string][]string{resource.Memory: mem, resource.Core: core, resource.GPU: {"GPU-a::gpu::0"}, "nvidia.com/gpu": {"x"}}},
		{Owner: Owner{Namespace: "ns", Pod: "q", Container: "c"}, Devices: map[string][]string{resource.Memory: {}}},
	})
	want := map[string]Owner{
		allocation.Key(resource.KindMem, mem):   owner,
		allocation.Key(resource.KindCore, core): owner,
	}
	if len(keys) != len(want) {
		t.Fatalf("keys %v, want %v", keys, want)
	}
	for k, o := range want {
		if keys[k] != o {
			t.Errorf("%s → %v, want %v", k, keys[k], o)
		}
	}
}

func TestFailedRefreshKeepsTheMapping(t *testing.T) {
	fail := false
	r := &Resolver{Source: func(context.Context) ([]Listing, error) {
		if fail {
			return nil, errors.New("kubelet restarting")
		}
		return []Listing{{Owner: Owner{"ns", "p", "c"}, Devices: map[string][]string{resource.Memory: {"GPU-a::mem::0"}}}}, nil
	}}
	if r.Ready() {
		t.Fatal("ready before the first answer")
	}
	if err := r.Refresh(context.Background()); err != nil || !r.Ready() || len(r.Live()) != 1 {
		t.Fatalf("refresh: %v ready %v live %v", err, r.Ready(), r.Live())
	}
	fail = true
	if err := r.Refresh(context.Background()); err == nil {
		t.Fatal("error not returned")
	}
	if _, ok := r.Owner(allocation.Key(resource.KindMem, []string{"GPU-a::mem::0"})); !ok {
		t.Error("a failed read dropped the mapping: every series would vanish while kubelet restarts")
	}
}

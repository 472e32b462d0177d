package daemon

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	configv1 "github.com/tessera-gpu/tessera/api/config/v1"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/resource"
	"github.com/tessera-gpu/tessera/internal/gpu/gputest"
)

// kubeletAllocate plays kubelet's device manager for one container of one
// resource: it asks for a preferred allocation, takes the preferred IDs,
// fills up with any other free IDs in its own order when the answer is
// short (as kubelet does), and calls Allocate.
func (e *env) kubeletAllocate(res string, size int) (preferred, ids []string, err error) {
	e.t.Helper()
	ctx := context.Background()
	c := e.client_(res)
	avail := e.available(res)
	pr, err := c.GetPreferredAllocation(ctx, &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{
		{AvailableDeviceIDs: avail, AllocationSize: int32(size)}}})
	if err != nil {
		e.t.Fatal(err)
	}
	preferred = pr.ContainerResponses[0].DeviceIDs
	ids = append(ids, preferred...)
	for _, id := range avail {
		if len(ids) == size {
			break
		}
		if !contains(ids, id) {
			ids = append(ids, id)
		}
	}
	_, err = c.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}})
	return preferred, ids, err
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// TestRequestLargerThanAnyGPUIsRefused: a container asking for more
// gpu-mem than one 80 GiB GPU holds, without tessera.io/gpu, is neither
// proposed a spread nor allocated one; Allocate's error (kubelet's
// admission error) names the request and the largest GPU. A container that
// kubelet cannot be matched to a pod is treated the same way.
func TestRequestLargerThanAnyGPUIsRefused(t *testing.T) {
	for name, objs := range map[string]bool{"pod known": true, "pod unknown": false} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, gputest.DGXH100)
			if objs {
				e.createPod(pod("big", t0, "", ctr{name: "c", mem: 100}))
			}
			e.start()
			preferred, ids, err := e.kubeletAllocate(resource.Memory, 100)
			if len(resource.GPUsOf(preferred)) > 1 {
				t.Fatalf("preferred allocation spreads over %v", resource.GPUsOf(preferred))
			}
			if len(resource.GPUsOf(ids)) != 2 {
				t.Fatalf("set-up: kubelet's IDs lie on %v", resource.GPUsOf(ids))
			}
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("Allocate of 100 units over 2 GPUs: %v", err)
			}
			msg := status.Convert(err).Message()
			for _, want := range []string{resource.Memory + ": 100 units (100Gi) requested for one GPU",
				fmt.Sprintf("largest GPU on this node, %s, holds 80 units (80Gi)", e.uuid(0)), "allowGPUSpill: true"} {
				if !strings.Contains(msg, want) {
					t.Errorf("error does not say %q: %s", want, msg)
				}
			}
			if len(e.d.Ledger.Snapshot()) != 0 {
				t.Fatalf("refused allocation recorded: %v", e.d.Ledger.Snapshot())
			}
		})
	}
}

// TestSpreadWhenAllowedOrRequested: with allowGPUSpill, or with
// tessera.io/gpu: 2, the same request is placed over two GPUs.
func TestSpreadWhenAllowedOrRequested(t *testing.T) {
	t.Run("allowGPUSpill", func(t *testing.T) {
		e := newEnv(t, gputest.DGXH100, pod("big", t0, "", ctr{name: "c", mem: 100}))
		e.start(func(c *configv1.Config) { c.AllowGPUSpill = true })
		ids, _ := e.admit(resource.Memory, 100)
		if g := resource.GPUsOf(ids); len(g) != 2 {
			t.Fatalf("100 units on %v", g)
		}
	})
	t.Run("gpu: 2", func(t *testing.T) {
		e := newEnv(t, gputest.DGXH100, pod("big", t0, "", ctr{name: "c", gpu: 2, mem: 100}))
		e.start()
		slots, _ := e.admit(resource.GPU, 2)
		ids, _ := e.admit(resource.Memory, 100)
		if g := resource.GPUsOf(ids); len(g) != 2 || fmt.Sprint(g) != fmt.Sprint(resource.GPUsOf(slots)) {
			t.Fatalf("100 units on %v, slots on %v", g, resource.GPUsOf(slots))
		}
	})
}

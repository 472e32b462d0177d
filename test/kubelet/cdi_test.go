package kubelet

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/kubernetes/pkg/kubelet/cm/devicemanager"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	annotations "github.com/tessera-gpu/tessera/api/annotations/v1"
	configv1 "github.com/tessera-gpu/tessera/api/config/v1"
)

// TestKubeletCDIStrategies: with each CDI strategy, what kubelet's real
// device manager hands the runtime for a container with gpu-mem 8 and
// gpu-core 30 assigned to GPU 2 — two plugin responses merged by kubelet:
// the GPU's CDI device name exactly once (in the CRI's CDIDevices, or in
// one cdi.k8s.io/ annotation the runtime parses), no device nodes, and the
// hook's mounts and limits as with envvar.
func TestKubeletCDIStrategies(t *testing.T) {
	for _, strategy := range []string{configv1.DeviceListCDICRI, configv1.DeviceListCDIAnnotations} {
		t.Run(strategy, func(t *testing.T) {
			c := newCluster(t)
			c.deviceList = strategy
			if err := os.MkdirAll(c.socketDir(), 0o755); err != nil {
				t.Fatal(err)
			}
			c.startPlugin()
			c.startKubelet()
			c.awaitCapacity(fullNode)

			shape := map[string][2]int64{"app": {8, 30}}
			p := makePod("cdi", time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), shape)
			p.Annotations = map[string]string{annotations.AssignmentKey: c.assignment(map[string]int{"app": 2}, shape)}
			c.addPod(p)
			ctr := p.Spec.Containers[0]
			if err := c.mgr.Allocate(context.Background(), p, &ctr, lifecycle.AddOperation); err != nil {
				t.Fatalf("kubelet Allocate: %v", err)
			}
			opts, err := c.mgr.GetDeviceRunContainerOptions(context.Background(), p, &ctr)
			if err != nil {
				t.Fatal(err)
			}
			want := []string{"nvidia.com/gpu=" + c.uuid(2)}
			got := cdiNames(t, opts, strategy)
			if !slices.Equal(got, want) {
				t.Errorf("CDI devices %v, want %v", got, want)
			}
			if len(opts.Devices) != 0 {
				t.Errorf("device nodes %v: under CDI the spec injects them", opts.Devices)
			}
			env := map[string]string{}
			for _, e := range opts.Envs {
				env[e.Name] = e.Value
			}
			mounts := map[string]bool{}
			for _, m := range opts.Mounts {
				mounts[m.ContainerPath] = true
			}
			if env["NVIDIA_VISIBLE_DEVICES"] != "void" || env["CUDA_VISIBLE_DEVICES"] != c.uuid(2) ||
				!mounts["/run/tessera/limits"] || !mounts["/run/tessera/core-limits"] || !mounts["/etc/ld.so.preload"] {
				t.Errorf("env %v mounts %v", env, mounts)
			}
		})
	}
}

// cdiNames reads the CDI devices kubelet passes on, the way the strategy
// puts them (duplicates kept: the runtime would see them).
func cdiNames(t *testing.T, opts *devicemanager.DeviceRunContainerOptions, strategy string) []string {
	t.Helper()
	var names []string
	switch strategy {
	case configv1.DeviceListCDICRI:
		for _, d := range opts.CDIDevices {
			names = append(names, d.Name)
		}
		if len(opts.Annotations) != 0 {
			t.Errorf("annotations %v with cdi-cri", opts.Annotations)
		}
	case configv1.DeviceListCDIAnnotations:
		ann := map[string]string{}
		for _, a := range opts.Annotations {
			if strings.HasPrefix(a.Name, cdi.AnnotationPrefix) {
				ann[a.Name] = a.Value
			}
		}
		_, devs, err := cdi.ParseAnnotations(ann)
		if err != nil {
			t.Fatal(err)
		}
		names = devs
		if len(opts.Annotations) != len(ann) || len(opts.CDIDevices) != 0 {
			t.Errorf("annotations %v, CDIDevices %v", opts.Annotations, opts.CDIDevices)
		}
	}
	return names
}

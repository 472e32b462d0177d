package allocation

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	configv1 "github.com/tessera-gpu/tessera/api/config/v1"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/resource"
)

// cdiNames reads the CDI devices a response names, whichever way it names them.
func cdiNames(t *testing.T, r *pluginapi.ContainerAllocateResponse) (fromCRI, fromAnnotations []string) {
	t.Helper()
	for _, d := range r.CdiDevices {
		fromCRI = append(fromCRI, d.Name)
	}
	_, devs, err := cdi.ParseAnnotations(r.Annotations)
	if err != nil {
		t.Fatalf("annotations %v: %v", r.Annotations, err)
	}
	return fromCRI, devs
}

// TestAllocateResponsePerDeviceListStrategy checks what each strategy hands
// the runtime for the same gpu-mem IDs on two GPUs: device nodes and
// NVIDIA_VISIBLE_DEVICES (envvar), or CDI device names of the configured
// kind in the CRI field or in a cdi.k8s.io/ annotation, never both. The
// hook's files and environment are the same in every strategy.
func TestAllocateResponsePerDeviceListStrategy(t *testing.T) {
	for _, tc := range []struct {
		strategy, kind string
	}{
		{configv1.DeviceListEnvVar, configv1.DefaultCDIKind},
		{"", configv1.DefaultCDIKind}, // a Builder built without a config
		{configv1.DeviceListCDIAnnotations, configv1.DefaultCDIKind},
		{configv1.DeviceListCDICRI, configv1.DefaultCDIKind},
		{configv1.DeviceListCDICRI, "sim.tessera.io/gpu"},
	} {
		t.Run(tc.strategy+"/"+tc.kind, func(t *testing.T) {
			b, gpus := builder(t)
			b.DeviceList, b.CDIKind = tc.strategy, tc.kind
			a, c := gpus[3].UUID, gpus[1].UUID
			ids := []string{a + "::mem::0", c + "::mem::9"}
			r, err := b.Container(resource.Memory, ids)
			if err != nil {
				t.Fatal(err)
			}
			want := []string{tc.kind + "=" + c, tc.kind + "=" + a}
			cri, ann := cdiNames(t, r)
			if r.Envs[EnvCUDAVisible] != c+","+a || r.Envs[EnvRegion] != RegionPath || r.Envs[EnvLimits] != LimitsPath {
				t.Errorf("env = %v", r.Envs)
			}
			if len(r.Mounts) != 5 {
				t.Errorf("mounts = %v, want hook, preload, hook conf, region, limits", r.Mounts)
			}
			switch tc.strategy {
			case configv1.DeviceListEnvVar, "":
				if r.Envs[EnvNVIDIA] != c+","+a || len(r.Devices) != 5 || cri != nil || ann != nil {
					t.Errorf("envvar: NVIDIA_VISIBLE_DEVICES %q, %d devices, CDI %v %v", r.Envs[EnvNVIDIA], len(r.Devices), cri, ann)
				}
			case configv1.DeviceListCDICRI:
				if !reflect.DeepEqual(cri, want) || ann != nil || len(r.Annotations) != 0 {
					t.Errorf("cdi-cri: CDIDevices %v annotations %v, want %v only", cri, r.Annotations, want)
				}
			case configv1.DeviceListCDIAnnotations:
				if !reflect.DeepEqual(ann, want) || cri != nil || len(r.Annotations) != 1 {
					t.Errorf("cdi-annotations: %v CDIDevices %v, want %v only", r.Annotations, cri, want)
				}
				for k := range r.Annotations {
					if !strings.HasPrefix(k, cdi.AnnotationPrefix+"tessera_") {
						t.Errorf("annotation key %q", k)
					}
				}
			}
			if tc.strategy == configv1.DeviceListCDICRI || tc.strategy == configv1.DeviceListCDIAnnotations {
				if len(r.Devices) != 0 || r.Envs[EnvNVIDIA] != "void" {
					t.Errorf("CDI: devices %v, NVIDIA_VISIBLE_DEVICES %q: the spec injects the nodes and the variable must not add GPUs", r.Devices, r.Envs[EnvNVIDIA])
				}
			}
		})
	}
}

// TestCDIAnnotationsMergeAcrossResources: kubelet merges a container's
// responses (gpu-mem and gpu-core on the same GPU) and fails on an
// annotation key given two values; the same GPUs must give the same key and
// value, other GPUs another key.
func TestCDIAnnotationsMergeAcrossResources(t *testing.T) {
	b, gpus := builder(t)
	b.DeviceList, b.CDIKind = configv1.DeviceListCDIAnnotations, configv1.DefaultCDIKind
	g := gpus[2].UUID
	mem, err := b.Container(resource.Memory, []string{g + "::mem::0"})
	if err != nil {
		t.Fatal(err)
	}
	core, err := b.Container(resource.Core, []string{g + "::core::0", g + "::core::1"})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(mem.Annotations, core.Annotations) {
		t.Fatalf("gpu-mem %v and gpu-core %v on one GPU differ", mem.Annotations, core.Annotations)
	}
	other, err := b.Container(resource.Memory, []string{gpus[4].UUID + "::mem::0"})
	if err != nil {
		t.Fatal(err)
	}
	for k := range other.Annotations {
		if _, clash := mem.Annotations[k]; clash {
			t.Fatalf("key %s names GPU 2 and GPU 4", k)
		}
	}
}

// TestCDIMIGNeedsNoMinorsFile: under CDI the spec's MIG device carries the
// capability nodes, so a node whose driver file is missing still allocates.
func TestCDIMIGNeedsNoMinorsFile(t *testing.T) {
	b, gpus := builder(t)
	b.DeviceList, b.CDIKind = configv1.DeviceListCDICRI, configv1.DefaultCDIKind
	if err := os.RemoveAll(filepath.Join(b.ProcRoot, "driver")); err != nil {
		t.Fatal(err)
	}
	m := gpus[7].MIG[0]
	r, err := b.Container(resource.MIGResource(m.Profile), []string{gpus[7].UUID + "::mig::" + m.UUID})
	if err != nil {
		t.Fatal(err)
	}
	cri, _ := cdiNames(t, r)
	if !reflect.DeepEqual(cri, []string{"nvidia.com/gpu=" + m.UUID}) || len(r.Devices) != 0 || r.Envs[EnvCUDAVisible] != m.UUID {
		t.Fatalf("MIG under cdi-cri: %v devices %v env %v", cri, r.Devices, r.Envs)
	}
}

// TestCDIKindRefusedAtAllocate: a Builder handed an invalid kind (bypassing
// config validation) refuses instead of naming devices no spec can have.
func TestCDIKindRefusedAtAllocate(t *testing.T) {
	b, gpus := builder(t)
	b.DeviceList, b.CDIKind = configv1.DeviceListCDICRI, "gpu"
	if _, err := b.Container(resource.Memory, []string{gpus[0].UUID + "::mem::0"}); err == nil || !strings.Contains(err.Error(), "cdiKind") {
		t.Fatalf("err = %v, want one naming cdiKind", err)
	}
}

// TestCDINamesValidatedInEveryStrategy: a device name the CDI library
// refuses (the MIG UUID format of drivers before R470,
// MIG-GPU-<uuid>/<gi>/<ci>, has slashes) fails Allocate with a message
// naming it under cdi-cri as under cdi-annotations, instead of reaching
// the runtime, which would refuse the container at start.
func TestCDINamesValidatedInEveryStrategy(t *testing.T) {
	const old = "MIG-GPU-5e3b8a5c-3f2a-4b1d-9e6f-0123456789ab/1/0"
	if _, err := CDIDeviceNames(configv1.DefaultCDIKind, []string{old}); err == nil || !strings.Contains(err.Error(), old) {
		t.Errorf("%s: err = %v, want one naming it", old, err)
	}
	names, err := CDIDeviceNames(configv1.DefaultCDIKind, []string{"MIG-5e3b8a5c-3f2a-4b1d-9e6f-0123456789ab", "GPU-1"})
	if err != nil || !reflect.DeepEqual(names, []string{"nvidia.com/gpu=MIG-5e3b8a5c-3f2a-4b1d-9e6f-0123456789ab", "nvidia.com/gpu=GPU-1"}) {
		t.Errorf("names = %v, err = %v", names, err)
	}
}

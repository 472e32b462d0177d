package allocation

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"

	configv1 "github.com/tessera-gpu/tessera/api/config/v1"
)

// cdiAnnotationPlugin is the plugin part of the cdi.k8s.io/ annotation key.
const cdiAnnotationPlugin = "tessera"

// visibleNone overrides an image's NVIDIA_VISIBLE_DEVICES (CUDA base images
// set "all") when CDI hands the devices over: an NVIDIA runtime hook that
// still reads the variable must not add every GPU of the node beside the
// CDI devices. The NVIDIA Container Toolkit reads "void" as no device.
const visibleNone = "void"

func (b *Builder) usesCDI() bool {
	return b.DeviceList == configv1.DeviceListCDIAnnotations || b.DeviceList == configv1.DeviceListCDICRI
}

// CDIDeviceNames are the fully qualified CDI names of devices (GPU or MIG
// UUIDs) in kind's spec: the NVIDIA Container Toolkit's and the simulated
// driver's specs both name one device per UUID. Each is checked with the
// CDI library's rules, for the CRI field as for the annotation (whose
// library call checks them too): a name the runtime would refuse at
// container start fails Allocate instead, naming the device.
func CDIDeviceNames(kind string, uuids []string) ([]string, error) {
	vendor, class := parser.ParseQualifier(kind)
	names := make([]string, 0, len(uuids))
	for _, u := range uuids {
		n := parser.QualifiedName(vendor, class, u)
		if _, _, _, err := parser.ParseQualifiedName(n); err != nil {
			return nil, fmt.Errorf("device %q is no valid CDI device name: %w", u, err)
		}
		names = append(names, n)
	}
	return names, nil
}

// addCDIDevices hands uuids over as CDI devices, the spec injecting their
// device nodes and driver libraries. CUDA_VISIBLE_DEVICES still lists
// them, in the order the limits files use.
//
// The annotation key is derived from the device list, so a container's
// gpu-mem and gpu-core responses on the same GPUs carry the same key and
// value, which kubelet merges without conflict.
func (b *Builder) addCDIDevices(r *pluginapi.ContainerAllocateResponse, uuids []string) error {
	if err := configv1.ValidateCDIKind(b.CDIKind); err != nil {
		return fmt.Errorf("cdiKind: %w", err)
	}
	names, err := CDIDeviceNames(b.CDIKind, uuids)
	if err != nil {
		return err
	}
	r.Envs[EnvNVIDIA] = visibleNone
	r.Envs[EnvCUDAVisible] = strings.Join(uuids, ",")
	switch b.DeviceList {
	case configv1.DeviceListCDICRI:
		for _, n := range names {
			r.CdiDevices = append(r.CdiDevices, &pluginapi.CDIDevice{Name: n})
		}
	case configv1.DeviceListCDIAnnotations:
		sum := sha256.Sum256([]byte(strings.Join(names, ",")))
		ann, err := cdi.UpdateAnnotations(nil, cdiAnnotationPlugin, hex.EncodeToString(sum[:8]), names)
		if err != nil {
			return fmt.Errorf("CDI annotation: %w", err)
		}
		r.Annotations = ann
	}
	return nil
}

package kubelet

import (
	"context"
	"net"
	"os"
	"path/filepath"

	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
	kubeletpodresources "k8s.io/kubernetes/pkg/kubelet/apis/podresources"
	"k8s.io/kubernetes/pkg/kubelet/cm/devicemanager"
)

func (c *cluster) podResourcesSocket() string {
	return filepath.Join(c.dir, "pod-resources", "kubelet.sock")
}

// servePodResources serves kubelet's own PodResources v1 server
// (NewV1PodResourcesServer: it lists the active pods, leaves regular init
// containers out and asks the device manager for each container's
// devices) on a unix socket, as kubelet does at
// /var/lib/kubelet/pod-resources/kubelet.sock.
func (c *cluster) servePodResources() {
	t := c.t
	sock := c.podResourcesSocket()
	if err := os.MkdirAll(filepath.Dir(sock), 0o755); err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	podresourcesapi.RegisterPodResourcesListerServer(srv, kubeletpodresources.NewV1PodResourcesServer(context.Background(),
		kubeletpodresources.PodResourcesProviders{
			Pods:             kubeletPods{c},
			Devices:          kubeletDevices{c},
			Cpus:             noManagers{},
			Memory:           noManagers{},
			DynamicResources: noManagers{},
		}))
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
}

// kubeletPods is kubelet's pod manager as the PodResources server sees it.
type kubeletPods struct{ c *cluster }

func (p kubeletPods) GetActivePods() []*corev1.Pod { return p.c.activePods() }
func (p kubeletPods) GetPods() []*corev1.Pod       { return p.c.activePods() }
func (p kubeletPods) GetPodByName(namespace, name string) (*corev1.Pod, bool) {
	for _, pod := range p.c.activePods() {
		if pod.Namespace == namespace && pod.Name == name {
			return pod, true
		}
	}
	return nil, false
}

// kubeletDevices is the DevicesProvider kubelet builds over its device
// manager (containerManagerImpl in pkg/kubelet/cm: GetDevices,
// GetAllocatableDevices and UpdateAllocatedDevices call the device
// manager and convert its answer). pkg/kubelet/cm links cgroups,
// cadvisor's container handlers and containerd's API, so it is not
// imported; containerDevices is its conversion, copied.
type kubeletDevices struct{ c *cluster }

func (d kubeletDevices) UpdateAllocatedDevices(logger klog.Logger) {
	if m := d.c.manager(); m != nil {
		m.UpdateAllocatedDevices(logger)
	}
}

func (d kubeletDevices) GetDevices(podUID, containerName string) []*podresourcesapi.ContainerDevices {
	if m := d.c.manager(); m != nil {
		return containerDevices(m.GetDevices(podUID, containerName))
	}
	return nil
}

func (d kubeletDevices) GetAllocatableDevices(logger klog.Logger) []*podresourcesapi.ContainerDevices {
	if m := d.c.manager(); m != nil {
		return containerDevices(m.GetAllocatableDevices(logger))
	}
	return nil
}

// containerDevices is containerDevicesFromResourceDeviceInstances of
// k8s.io/kubernetes v1.37.2 pkg/kubelet/cm/container_manager.go: one entry
// per device ID, or one per NUMA node of a device with topology, in map
// order.
func containerDevices(devs devicemanager.ResourceDeviceInstances) []*podresourcesapi.ContainerDevices {
	var respDevs []*podresourcesapi.ContainerDevices
	for resourceName, resourceDevs := range devs {
		for devID, dev := range resourceDevs {
			topo := dev.GetTopology()
			if topo == nil {
				respDevs = append(respDevs, &podresourcesapi.ContainerDevices{ResourceName: resourceName, DeviceIds: []string{devID}})
				continue
			}
			for _, node := range topo.GetNodes() {
				respDevs = append(respDevs, &podresourcesapi.ContainerDevices{
					ResourceName: resourceName,
					DeviceIds:    []string{devID},
					Topology:     &podresourcesapi.TopologyInfo{Nodes: []*podresourcesapi.NUMANode{{ID: node.GetID()}}},
				})
			}
		}
	}
	return respDevs
}

// noManagers is a kubelet without CPU and memory managers or DRA.
type noManagers struct{}

func (noManagers) GetCPUs(*corev1.Pod, *corev1.Container) []int64 { return nil }
func (noManagers) GetPodCPUs(string) []int64                      { return nil }
func (noManagers) GetAllocatableCPUs() []int64                    { return nil }
func (noManagers) GetMemory(klog.Logger, *corev1.Pod, *corev1.Container) []*podresourcesapi.ContainerMemory {
	return nil
}
func (noManagers) GetPodMemory(klog.Logger, string) []*podresourcesapi.ContainerMemory { return nil }
func (noManagers) GetAllocatableMemory(klog.Logger) []*podresourcesapi.ContainerMemory { return nil }
func (noManagers) GetDynamicResources(klog.Logger, *corev1.Pod, *corev1.Container) []*podresourcesapi.DynamicResource {
	return nil
}

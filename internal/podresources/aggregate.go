// Package podresources is how the node binaries read kubelet's PodResources
// API: a client for its socket, and Aggregate, the one interpretation of
// its List answer.
//
// Kubelet does not list a container's allocation of a resource as one
// entry. It emits one ContainerDevices entry per device ID, and one per
// NUMA node of that ID when the device plugin reported topology
// (containerDevicesFromResourceDeviceInstances in pkg/kubelet/cm), in map
// order. A reader that takes an entry for a container's whole allocation
// keeps one ID of many; Aggregate folds the entries back into sets.
package podresources

import (
	"sort"

	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// Pod is one pod kubelet lists, with every container it lists.
type Pod struct {
	Namespace string
	Name      string
	// Containers are sorted by name. A container listed without devices
	// is here with no Devices: kubelet vouches that it holds none.
	Containers []Container
}

// Container is one listed container's devices.
type Container struct {
	Name string
	// Devices maps a resource name to the device IDs the container holds
	// of it, sorted and without duplicates. A resource is present only
	// with at least one ID.
	Devices map[string][]string
}

// Container returns the pod's listed container called name, or nil.
func (p *Pod) Container(name string) *Container {
	i := sort.Search(len(p.Containers), func(i int) bool { return p.Containers[i].Name >= name })
	if i < len(p.Containers) && p.Containers[i].Name == name {
		return &p.Containers[i]
	}
	return nil
}

// Aggregate folds kubelet's List answer into one device ID set per
// (namespace, pod, container) and resource, whatever the grouping and
// order of the entries: entries of one container may be split over many
// ContainerDevices, repeated (one per NUMA node), and a pod or container
// may appear more than once. Empty IDs are dropped. Pods are sorted by
// namespace and name.
func Aggregate(resp *podresourcesapi.ListPodResourcesResponse) []Pod {
	type podKey struct{ namespace, name string }
	byPod := map[podKey]map[string]map[string]map[string]bool{} // pod → container → resource → IDs
	for _, pr := range resp.GetPodResources() {
		k := podKey{pr.GetNamespace(), pr.GetName()}
		ctrs := byPod[k]
		if ctrs == nil {
			ctrs = map[string]map[string]map[string]bool{}
			byPod[k] = ctrs
		}
		for _, c := range pr.GetContainers() {
			devs := ctrs[c.GetName()]
			if devs == nil {
				devs = map[string]map[string]bool{}
				ctrs[c.GetName()] = devs
			}
			for _, d := range c.GetDevices() {
				addIDs(devs, d.GetResourceName(), d.GetDeviceIds())
			}
		}
	}
	pods := make([]Pod, 0, len(byPod))
	for k, ctrs := range byPod {
		p := Pod{Namespace: k.namespace, Name: k.name, Containers: make([]Container, 0, len(ctrs))}
		for name, devs := range ctrs {
			p.Containers = append(p.Containers, Container{Name: name, Devices: sortedSets(devs)})
		}
		sort.Slice(p.Containers, func(i, j int) bool { return p.Containers[i].Name < p.Containers[j].Name })
		pods = append(pods, p)
	}
	sort.Slice(pods, func(i, j int) bool {
		if pods[i].Namespace != pods[j].Namespace {
			return pods[i].Namespace < pods[j].Namespace
		}
		return pods[i].Name < pods[j].Name
	})
	return pods
}

func addIDs(devs map[string]map[string]bool, res string, ids []string) {
	for _, id := range ids {
		if id == "" {
			continue
		}
		if devs[res] == nil {
			devs[res] = map[string]bool{}
		}
		devs[res][id] = true
	}
}

func sortedSets(devs map[string]map[string]bool) map[string][]string {
	out := make(map[string][]string, len(devs))
	for res, set := range devs {
		ids := make([]string, 0, len(set))
		for id := range set {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		out[res] = ids
	}
	return out
}

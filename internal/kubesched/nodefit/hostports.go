package nodefit

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// FreePorts is kube-scheduler's NodePorts refusal: another pod on the node
// uses a host port (protocol, IP) the pod asks for.
const FreePorts = "node(s) didn't have free ports for the requested pod ports"

// bindAll is the host IP a port without one binds: it conflicts with the
// same port and protocol on every IP.
const bindAll = "0.0.0.0"

// HostPort is one host port a pod binds on its node, with kube-scheduler's
// defaults filled in (protocol TCP, IP 0.0.0.0).
type HostPort struct {
	IP       string          `json:"i"`
	Protocol corev1.Protocol `json:"p"`
	Port     int32           `json:"n"`
}

// HostPorts are the host ports pod p binds as kube-scheduler counts them
// (util.GetHostPorts): every app container's, and a sidecar's (an init
// container with restartPolicy Always, which runs beside them); a regular
// init container has ended before the others start. Sorted, duplicates
// dropped; nil when p binds none.
func HostPorts(p *corev1.Pod) []HostPort {
	var out []HostPort
	add := func(cs []corev1.Container, sidecarsOnly bool) {
		for _, c := range cs {
			if sidecarsOnly && (c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways) {
				continue
			}
			for _, cp := range c.Ports {
				if cp.HostPort <= 0 {
					continue
				}
				hp := HostPort{IP: cp.HostIP, Protocol: cp.Protocol, Port: cp.HostPort}
				if hp.IP == "" {
					hp.IP = bindAll
				}
				if hp.Protocol == "" {
					hp.Protocol = corev1.ProtocolTCP
				}
				out = append(out, hp)
			}
		}
	}
	add(p.Spec.InitContainers, true)
	add(p.Spec.Containers, false)
	slices.SortFunc(out, func(a, b HostPort) int {
		if a.Port != b.Port {
			return int(a.Port) - int(b.Port)
		}
		if a.Protocol != b.Protocol {
			return strings.Compare(string(a.Protocol), string(b.Protocol))
		}
		return strings.Compare(a.IP, b.IP)
	})
	return slices.Compact(out)
}

// UsedPorts are the host ports taken on one node.
type UsedPorts map[HostPort]struct{}

// Add marks ports taken.
func (u UsedPorts) Add(ports []HostPort) {
	for _, p := range ports {
		u[p] = struct{}{}
	}
}

// Conflicts reports whether any of ports is taken, by kube-scheduler's rule
// (HostPortInfo.CheckConflict): the same port and protocol on the same IP,
// or on any IP when either side binds 0.0.0.0.
func (u UsedPorts) Conflicts(ports []HostPort) bool {
	for _, p := range ports {
		if p.IP == bindAll {
			for q := range u {
				if q.Port == p.Port && q.Protocol == p.Protocol {
					return true
				}
			}
			continue
		}
		if _, ok := u[p]; ok {
			return true
		}
		if _, ok := u[HostPort{IP: bindAll, Protocol: p.Protocol, Port: p.Port}]; ok {
			return true
		}
	}
	return false
}

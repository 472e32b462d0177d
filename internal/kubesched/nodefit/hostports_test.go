package nodefit

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func withPorts(init []corev1.Container, ports ...corev1.ContainerPort) *corev1.Pod {
	return &corev1.Pod{Spec: corev1.PodSpec{InitContainers: init, Containers: []corev1.Container{{Name: "app", Ports: ports}}}}
}

// usedBy is the node's used ports when the given pods run there.
func usedBy(pods ...*corev1.Pod) UsedPorts {
	u := UsedPorts{}
	for _, p := range pods {
		u.Add(HostPorts(p))
	}
	return u
}

func TestHostPortConflictsAsKubeSchedulersNodePorts(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	tcp80 := corev1.ContainerPort{ContainerPort: 8080, HostPort: 80}
	udp80 := corev1.ContainerPort{ContainerPort: 8080, HostPort: 80, Protocol: corev1.ProtocolUDP}
	ip1 := corev1.ContainerPort{ContainerPort: 8080, HostPort: 80, HostIP: "10.0.0.1"}
	ip2 := corev1.ContainerPort{ContainerPort: 8080, HostPort: 80, HostIP: "10.0.0.2"}
	any80 := corev1.ContainerPort{ContainerPort: 8080, HostPort: 80, HostIP: "0.0.0.0", Protocol: corev1.ProtocolTCP}
	tcp81 := corev1.ContainerPort{ContainerPort: 8080, HostPort: 81}
	noHost := corev1.ContainerPort{ContainerPort: 80}
	sidecar := []corev1.Container{{Name: "proxy", RestartPolicy: &always, Ports: []corev1.ContainerPort{tcp80}}}
	setup := []corev1.Container{{Name: "setup", Ports: []corev1.ContainerPort{tcp80}}}
	cases := []struct {
		name string
		pod  *corev1.Pod
		used UsedPorts
		want string
	}{
		{"no host ports, node full of them", withPorts(nil, noHost), usedBy(withPorts(nil, tcp80, udp80)), ""},
		{"no pods on the node", withPorts(nil, tcp80), nil, ""},
		{"same port, defaults filled in", withPorts(nil, tcp80), usedBy(withPorts(nil, any80)), FreePorts},
		{"same port, other protocol", withPorts(nil, udp80), usedBy(withPorts(nil, tcp80)), ""},
		{"other port", withPorts(nil, tcp81), usedBy(withPorts(nil, tcp80)), ""},
		{"an IP against 0.0.0.0", withPorts(nil, ip1), usedBy(withPorts(nil, tcp80)), FreePorts},
		{"0.0.0.0 against an IP", withPorts(nil, tcp80), usedBy(withPorts(nil, ip1)), FreePorts},
		{"the same IP", withPorts(nil, ip1), usedBy(withPorts(nil, ip1)), FreePorts},
		{"another IP", withPorts(nil, ip2), usedBy(withPorts(nil, ip1)), ""},
		{"containerPort without hostPort is no host port", withPorts(nil, noHost), usedBy(withPorts(nil, noHost)), ""},
		{"a sidecar's port counts for the pod", withPorts(sidecar), usedBy(withPorts(nil, tcp80)), FreePorts},
		{"a sidecar's port counts on the node", withPorts(nil, tcp80), usedBy(withPorts(sidecar)), FreePorts},
		{"a regular init container's port has ended", withPorts(setup, tcp81), usedBy(withPorts(nil, tcp80)), ""},
		{"one of several ports taken", withPorts(nil, tcp81, udp80), usedBy(withPorts(nil, udp80)), FreePorts},
	}
	for _, tc := range cases {
		c, err := For(tc.pod)
		if err != nil {
			t.Fatal(err)
		}
		if got := c.Refusal(nodeWith(nil, false), tc.used); got != tc.want {
			t.Errorf("%s: refusal %q, want %q", tc.name, got, tc.want)
		}
	}
}

// NodePorts comes after NodeAffinity in kube-scheduler's filter order: a
// node refusing both names the affinity.
func TestPortsAfterAffinity(t *testing.T) {
	p := withPorts(nil, corev1.ContainerPort{HostPort: 80})
	p.Spec.NodeSelector = map[string]string{"pool": "a"}
	c, err := For(p)
	if err != nil {
		t.Fatal(err)
	}
	used := usedBy(withPorts(nil, corev1.ContainerPort{HostPort: 80}))
	if got := c.Refusal(nodeWith(map[string]string{"pool": "b"}, false), used); got != AffinityMismatch {
		t.Fatalf("refusal %q, want %q", got, AffinityMismatch)
	}
	if got := c.Refusal(nodeWith(map[string]string{"pool": "a"}, false), used); got != FreePorts {
		t.Fatalf("refusal %q, want %q", got, FreePorts)
	}
}

func TestHostPortsShareAKey(t *testing.T) {
	a := withPorts(nil, corev1.ContainerPort{HostPort: 80}, corev1.ContainerPort{HostPort: 53, Protocol: corev1.ProtocolUDP})
	b := withPorts(nil, corev1.ContainerPort{HostPort: 53, Protocol: corev1.ProtocolUDP, ContainerPort: 5353}, corev1.ContainerPort{HostPort: 80, Protocol: corev1.ProtocolTCP, HostIP: "0.0.0.0"})
	other := withPorts(nil, corev1.ContainerPort{HostPort: 81})
	if Key(a) == "" || Key(a) != Key(b) {
		t.Fatalf("pods binding the same host ports have keys %q and %q", Key(a), Key(b))
	}
	if Key(a) == Key(other) {
		t.Fatal("pods binding different host ports share a key")
	}
	if Key(withPorts(nil, corev1.ContainerPort{ContainerPort: 80})) != "" {
		t.Fatal("a pod without host ports has a key")
	}
}

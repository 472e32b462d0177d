package nodefit

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func nodeWith(labels map[string]string, unschedulable bool, taints ...corev1.Taint) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: labels}, Spec: corev1.NodeSpec{Unschedulable: unschedulable, Taints: taints}}
}

func TestRefusalsInKubeSchedulersOrderAndWords(t *testing.T) {
	dedicated := corev1.Taint{Key: "dedicated", Value: "ml", Effect: corev1.TaintEffectNoSchedule}
	soft := corev1.Taint{Key: "soft", Effect: corev1.TaintEffectPreferNoSchedule}
	noExec := corev1.Taint{Key: "node.kubernetes.io/not-ready", Effect: corev1.TaintEffectNoExecute}
	plain := &corev1.Pod{}
	pinned := &corev1.Pod{Spec: corev1.PodSpec{NodeSelector: map[string]string{"pool": "a"}}}
	tolerant := &corev1.Pod{Spec: corev1.PodSpec{Tolerations: []corev1.Toleration{
		{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "ml", Effect: corev1.TaintEffectNoSchedule},
		{Key: corev1.TaintNodeUnschedulable, Operator: corev1.TolerationOpExists},
	}}}
	affine := &corev1.Pod{Spec: corev1.PodSpec{Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "gpu", Operator: corev1.NodeSelectorOpIn, Values: []string{"a100", "h100"}}}}}},
	}}}}
	cases := []struct {
		name string
		pod  *corev1.Pod
		node *corev1.Node
		want string
	}{
		{"plain pod, plain node", plain, nodeWith(nil, false), ""},
		{"PreferNoSchedule only weighs", plain, nodeWith(nil, false, soft), ""},
		{"NoSchedule taint", plain, nodeWith(nil, false, dedicated), "node(s) had untolerated taint {dedicated: ml}"},
		{"NoExecute taint", plain, nodeWith(nil, false, noExec), "node(s) had untolerated taint {node.kubernetes.io/not-ready: }"},
		{"tolerated taint", tolerant, nodeWith(nil, false, dedicated), ""},
		{"cordoned", plain, nodeWith(nil, true), Unschedulable},
		{"cordoned but tolerated", tolerant, nodeWith(nil, true), ""},
		{"unschedulable is checked before taints", plain, nodeWith(nil, true, dedicated), Unschedulable},
		{"taints before affinity", pinned, nodeWith(nil, false, dedicated), "node(s) had untolerated taint {dedicated: ml}"},
		{"selector matches", pinned, nodeWith(map[string]string{"pool": "a"}, false), ""},
		{"selector does not match", pinned, nodeWith(map[string]string{"pool": "b"}, false), AffinityMismatch},
		{"affinity In matches", affine, nodeWith(map[string]string{"gpu": "h100"}, false), ""},
		{"affinity In misses", affine, nodeWith(map[string]string{"gpu": "t4"}, false), AffinityMismatch},
	}
	for _, tc := range cases {
		c, err := For(tc.pod)
		if err != nil {
			t.Fatal(err)
		}
		if got := c.Refusal(tc.node, nil); got != tc.want {
			t.Errorf("%s: refusal %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestKeyAndPreference(t *testing.T) {
	if Key(&corev1.Pod{}) != "" {
		t.Fatal("a pod without constraints has an empty key")
	}
	a := &corev1.Pod{Spec: corev1.PodSpec{NodeSelector: map[string]string{"x": "1", "y": "2"}}}
	b := &corev1.Pod{Spec: corev1.PodSpec{NodeSelector: map[string]string{"y": "2", "x": "1"}}}
	c := &corev1.Pod{Spec: corev1.PodSpec{NodeSelector: map[string]string{"x": "1"}}}
	if Key(a) != Key(b) || Key(a) == Key(c) || Key(c) == "" {
		t.Fatalf("keys: %q %q %q", Key(a), Key(b), Key(c))
	}
	p := &corev1.Pod{Spec: corev1.PodSpec{Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{
			{Weight: 30, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}}}},
			{Weight: 5, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "fast", Operator: corev1.NodeSelectorOpExists}}}},
		}}}}}
	cs, err := For(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		labels map[string]string
		want   int64
	}{{nil, 0}, {map[string]string{"zone": "a"}, 30}, {map[string]string{"zone": "a", "fast": ""}, 35}, {map[string]string{"zone": "b", "fast": ""}, 5}} {
		if got := cs.Preference(nodeWith(tc.labels, false)); got != tc.want {
			t.Errorf("labels %v: preference %d, want %d", tc.labels, got, tc.want)
		}
	}
	bad := &corev1.Pod{Spec: corev1.PodSpec{Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{
			{Weight: 1, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: "Near", Values: []string{"a"}}}}}}}}}}
	if _, err := For(bad); err == nil {
		t.Fatal("an unparsable preferred term is an error")
	}
}

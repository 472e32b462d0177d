package metrics

import "testing"

func TestLabelSetIsSortedByNameWithItsValues(t *testing.T) {
	ls := newLabelSet(containerGPULabels, []string{"ns", "pod-1", "main", "GPU-0", "node-a"})
	want := [][2]string{{"container", "main"}, {"gpu_uuid", "GPU-0"}, {"namespace", "ns"}, {"node", "node-a"}, {"pod", "pod-1"}}
	if len(ls) != len(want) {
		t.Fatalf("%d pairs, want %d", len(ls), len(want))
	}
	for i, w := range want {
		if ls[i].GetName() != w[0] || ls[i].GetValue() != w[1] {
			t.Errorf("pair %d = %s=%s, want %s=%s", i, ls[i].GetName(), ls[i].GetValue(), w[0], w[1])
		}
	}
}

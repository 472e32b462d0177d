package interpod

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// What a pod without terms costs the scheduling loop: reading it, asking
// whether any registered terms select it, and its placement and removal
// in the index — with no state built (no pod has terms), and with one
// anti-affinity pod whose terms do not select it and whose state is
// read.
func BenchmarkPlainPod(b *testing.B) {
	for _, withState := range []bool{false, true} {
		b.Run(fmt.Sprintf("states=%v", withState), func(b *testing.B) {
			c := zones()
			x := NewIndex(c)
			if withState {
				d, _ := Describe(pod("default", "w", app("web"), antiAffinity("web", "zone")))
				x.Target("sig", d)
				x.Want("web", d, nil)
				x.State("web")
			}
			p := pod("default", "plain", map[string]string{"app": "batch", "pod-template-hash": "5d8f7"})
			p.Spec.Containers = []corev1.Container{{Name: "main"}}
			b.ReportAllocs()
			for b.Loop() {
				d, err := Describe(p)
				if err != nil || x.Targeted(d) {
					b.Fatal("a plain pod selected", err)
				}
				x.Place(d, "n1")
				x.Unplace(d.Key)
				if withState {
					x.State("web") // read, as the filter reads it: kept
				}
			}
		})
	}
}

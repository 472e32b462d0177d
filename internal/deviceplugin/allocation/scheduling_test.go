package allocation

import (
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tessera-gpu/tessera/internal/deviceplugin/resource"
	"github.com/tessera-gpu/tessera/internal/priority"
	"github.com/tessera-gpu/tessera/internal/region"
)

func pod(ann map[string]string, value *int32) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "n", Annotations: ann}, Spec: corev1.PodSpec{Priority: value}}
}

func TestSchedulingOfPods(t *testing.T) {
	v := func(x int32) *int32 { return &x }
	table := priority.DefaultTable()
	for _, c := range []struct {
		ann   map[string]string
		value *int32
		want  Scheduling
		err   string
	}{
		{nil, nil, Scheduling{region.PolicyGuaranteed, 2}, ""},
		{map[string]string{PolicyAnnotation: "hard"}, nil, Scheduling{region.PolicyHard, 2}, ""},
		{map[string]string{priority.AnnotationKey: "P0"}, v(0), Scheduling{region.PolicyGuaranteed, 0}, ""},
		{map[string]string{priority.AnnotationKey: "training"}, v(2000000000), Scheduling{region.PolicyGuaranteed, 2}, ""},
		{nil, v(150000), Scheduling{region.PolicyGuaranteed, 1}, ""},
		{nil, v(2000000000), Scheduling{region.PolicyGuaranteed, 0}, ""},
		{map[string]string{PolicyAnnotation: "soft"}, nil, Unattributed, "compute-policy"},
		{map[string]string{priority.AnnotationKey: "urgent"}, nil, Unattributed, "urgent"},
	} {
		got, err := SchedulingOf(pod(c.ann, c.value), table)
		if got != c.want || (c.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.err)) {
			t.Errorf("%v value %v: %v, %v; want %v, error with %q", c.ann, c.value, got, err, c.want, c.err)
		}
	}
}

// A gpu-core allocation gets its core region mounted read-write, its policy
// and priority in the core-limits file, and the reconciler can correct them.
func TestCoreAllocationCarriesSchedulingAndRegion(t *testing.T) {
	b, gpus := builder(t)
	ids := []string{gpus[0].UUID + "::core::1", gpus[0].UUID + "::core::2"}
	r, err := b.ContainerFor(resource.Core, ids, Scheduling{region.PolicyHard, 1})
	if err != nil {
		t.Fatal(err)
	}
	dir := b.ContainerDir(resource.KindCore, ids)
	if r.Envs[EnvCoreRegion] != CoreRegionPath || r.Envs[EnvCoreLimits] != CoreLimitsPath {
		t.Fatalf("env %v", r.Envs)
	}
	found := false
	for _, m := range r.Mounts {
		if m.ContainerPath == CoreRegionPath {
			found = m.HostPath == filepath.Join(dir, "core-region") && !m.ReadOnly
		}
	}
	if !found {
		t.Fatalf("no read-write core region mount in %v", r.Mounts)
	}
	if _, err := region.OpenRegion(filepath.Join(dir, "core-region")); err != nil {
		t.Fatal(err)
	}
	read := func() region.DeviceLimit {
		l, err := region.OpenLimits(filepath.Join(dir, "core-limits"))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return l.Devices()[0]
	}
	if d := read(); d.Policy != region.PolicyHard || d.Priority != 1 || d.CoreLimitPct != 2 {
		t.Fatalf("core-limits %+v", d)
	}
	if err := b.SetScheduling(ids, Scheduling{region.PolicyGuaranteed, 0}); err != nil {
		t.Fatal(err)
	}
	if d := read(); d.Policy != region.PolicyGuaranteed || d.Priority != 0 {
		t.Fatalf("after SetScheduling %+v", d)
	}
	// A restore keeps the corrected values (valid files are left alone).
	if err := b.Restore(resource.Core, ids); err != nil {
		t.Fatal(err)
	}
	if d := read(); d.Priority != 0 {
		t.Fatalf("after Restore %+v", d)
	}
}

package volumes

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/component-helpers/storage/volume"
	"k8s.io/utils/ptr"
)

const (
	wffc      = "local"     // WaitForFirstConsumer, kubernetes.io/no-provisioner
	immediate = "immediate" // Immediate, a provisioner
	dynamic   = "dynamic"   // WaitForFirstConsumer, a provisioner, any node
	zonal     = "zonal"     // WaitForFirstConsumer, a provisioner, zone a only
)

func classes() []runtime.Object {
	mk := func(name, provisioner string, mode storagev1.VolumeBindingMode, topo ...corev1.TopologySelectorTerm) runtime.Object {
		return &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: provisioner, VolumeBindingMode: &mode, AllowedTopologies: topo}
	}
	return []runtime.Object{
		mk(wffc, volume.NotSupportedProvisioner, storagev1.VolumeBindingWaitForFirstConsumer),
		mk(immediate, "csi.example.com", storagev1.VolumeBindingImmediate),
		mk(dynamic, "csi.example.com", storagev1.VolumeBindingWaitForFirstConsumer),
		mk(zonal, "csi.example.com", storagev1.VolumeBindingWaitForFirstConsumer, corev1.TopologySelectorTerm{
			MatchLabelExpressions: []corev1.TopologySelectorLabelRequirement{{Key: "topology.kubernetes.io/zone", Values: []string{"a"}}}}),
	}
}

func node(name, zone string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name, "topology.kubernetes.io/zone": zone}}}
}

type claimOpt func(*corev1.PersistentVolumeClaim)

func claim(name, class string, opts ...claimOpt) *corev1.PersistentVolumeClaim {
	c := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name)},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("10Gi")}}}}
	if class != "" {
		c.Spec.StorageClassName = ptr.To(class)
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

func boundTo(pv string) claimOpt {
	return func(c *corev1.PersistentVolumeClaim) {
		c.Spec.VolumeName = pv
		c.Annotations = map[string]string{volume.AnnBindCompleted: "yes"}
		c.Status.Phase = corev1.ClaimBound
	}
}

func selected(n string) claimOpt {
	return func(c *corev1.PersistentVolumeClaim) { c.Annotations = map[string]string{volume.AnnSelectedNode: n} }
}

func deleting(c *corev1.PersistentVolumeClaim) {
	now := metav1.Now()
	c.DeletionTimestamp = &now
	c.Finalizers = []string{"kubernetes.io/pvc-protection"}
}

func lost(c *corev1.PersistentVolumeClaim) {
	c.Spec.VolumeName, c.Status.Phase = "gone", corev1.ClaimLost
}

func ownedBy(uid types.UID) claimOpt {
	return func(c *corev1.PersistentVolumeClaim) {
		c.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "p", UID: uid, Controller: ptr.To(true)}}
	}
}

// localPV is a volume of class on host (nil: any node), bound to claim
// when claimRef is set.
func localPV(name, class, host string, ref *corev1.PersistentVolumeClaim) *corev1.PersistentVolume {
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{StorageClassName: class, AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("20Gi")},
			PersistentVolumeSource: corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: "/mnt/" + name}}},
		Status: corev1.PersistentVolumeStatus{Phase: corev1.VolumeAvailable}}
	if host != "" {
		pv.Spec.NodeAffinity = &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: []string{host}}}}}}}
	}
	if ref != nil {
		pv.Spec.ClaimRef = &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: ref.Namespace, Name: ref.Name, UID: ref.UID}
		pv.Status.Phase = corev1.VolumeBound
	}
	return pv
}

func podWith(claims ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "p", UID: "uid-p"}}
	for _, c := range claims {
		if name, ok := strings.CutPrefix(c, "ephemeral:"); ok {
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{}}})
			continue
		}
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: c, VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: c}}})
	}
	p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "cfg", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	return p
}

type world struct {
	client *fake.Clientset
	b      *Binder
	stop   context.CancelFunc
	used   map[string]bool // claims other pods use
}

func newWorld(t *testing.T, objs ...runtime.Object) *world {
	t.Helper()
	for _, o := range objs {
		if m, err := meta.Accessor(o); err == nil && m.GetResourceVersion() == "" {
			m.SetResourceVersion("1")
		}
	}
	client := fake.NewClientset(append(classes(), objs...)...)
	versioned(client)
	f := informers.NewSharedInformerFactory(client, 0)
	pvc, pv, sc := f.Core().V1().PersistentVolumeClaims(), f.Core().V1().PersistentVolumes(), f.Storage().V1().StorageClasses()
	used := map[string]bool{}
	b := NewBinder(pvc.Lister(), pv.Lister(), sc.Lister(), func(ns, claim string) bool { return used[ns+"/"+claim] })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), pvc.Informer().HasSynced, pv.Informer().HasSynced, sc.Informer().HasSynced) {
		t.Fatal("caches did not sync")
	}
	return &world{client: client, b: b, stop: cancel, used: used}
}

// The rules and their words, one case per rule (kube-scheduler v1.37's
// VolumeBinding PreFilter and Filter).
func TestRules(t *testing.T) {
	n1, n2, nb := node("n1", "a"), node("n2", "a"), node("nb", "b")
	pvcA := claim("a", wffc)
	tests := []struct {
		name   string
		objs   []runtime.Object
		pod    *corev1.Pod
		used   []string            // claims another pod uses
		pod403 string              // the pod's own refusal
		nodes  map[string][]string // node → refusal (nil: admitted)
	}{
		{name: "missing claim", pod: podWith("data"), pod403: `persistentvolumeclaim "data" not found`},
		{name: "claim being deleted", objs: []runtime.Object{claim("data", wffc, deleting)}, pod: podWith("data"),
			pod403: `persistentvolumeclaim "data" is being deleted`},
		{name: "claim lost", objs: []runtime.Object{claim("data", wffc, lost)}, pod: podWith("data"),
			pod403: `persistentvolumeclaim "data" bound to non-existent persistentvolume "gone"`},
		{name: "ephemeral claim not created yet", pod: podWith("ephemeral:scratch"),
			pod403: `waiting for ephemeral volume controller to create the persistentvolumeclaim "p-scratch"`},
		{name: "ephemeral claim of another pod", objs: []runtime.Object{claim("p-scratch", dynamic, ownedBy("uid-other"))}, pod: podWith("ephemeral:scratch"),
			pod403: "PVC default/p-scratch was not created for pod default/p (pod is not owner)"},
		{name: "ephemeral claim of the pod provisions", objs: []runtime.Object{claim("p-scratch", dynamic, ownedBy("uid-p"))}, pod: podWith("ephemeral:scratch"),
			nodes: map[string][]string{"n1": nil, "nb": nil}},
		{name: "unbound immediate claim", objs: []runtime.Object{claim("data", immediate)}, pod: podWith("data"), pod403: UnboundImmediate},
		{name: "unbound claim without class", objs: []runtime.Object{claim("data", "")}, pod: podWith("data"), pod403: UnboundImmediate},
		{name: "pre-bound claim waits for the PV controller", objs: []runtime.Object{claim("data", wffc, func(c *corev1.PersistentVolumeClaim) { c.Spec.VolumeName = "pv1" })},
			pod: podWith("data"), pod403: UnboundImmediate},
		{name: "bound volume's node affinity", objs: []runtime.Object{claim("data", wffc, boundTo("pv1")), localPV("pv1", wffc, "n1", claim("data", wffc))},
			pod: podWith("data"), nodes: map[string][]string{"n1": nil, "n2": {NodeConflict}}},
		{name: "bound volume missing", objs: []runtime.Object{claim("data", wffc, boundTo("pv1"))},
			pod: podWith("data"), nodes: map[string][]string{"n1": {PVNotExist}}},
		{name: "local volume for a WaitForFirstConsumer claim", objs: []runtime.Object{pvcA, localPV("pv1", wffc, "n1", nil)},
			pod: podWith("a"), nodes: map[string][]string{"n1": nil, "n2": {BindConflict}}},
		{name: "volume too small", objs: []runtime.Object{claim("a", wffc, func(c *corev1.PersistentVolumeClaim) {
			c.Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse("100Gi")
		}), localPV("pv1", wffc, "n1", nil)},
			pod: podWith("a"), nodes: map[string][]string{"n1": {BindConflict}}},
		{name: "two claims never take one volume", objs: []runtime.Object{pvcA, claim("b", wffc), localPV("pv1", wffc, "n1", nil)},
			pod: podWith("a", "b"), nodes: map[string][]string{"n1": {BindConflict}}},
		{name: "two claims, two volumes", objs: []runtime.Object{pvcA, claim("b", wffc), localPV("pv1", wffc, "n1", nil), localPV("pv2", wffc, "n1", nil)},
			pod: podWith("a", "b"), nodes: map[string][]string{"n1": nil, "n2": {BindConflict}}},
		{name: "dynamic provisioning anywhere", objs: []runtime.Object{claim("a", dynamic)},
			pod: podWith("a"), nodes: map[string][]string{"n1": nil, "nb": nil}},
		{name: "allowedTopologies", objs: []runtime.Object{claim("a", zonal)},
			pod: podWith("a"), nodes: map[string][]string{"n1": nil, "nb": {BindConflict}}},
		{name: "provisioning asked for on a node", objs: []runtime.Object{claim("a", dynamic, selected("n2"))},
			pod: podWith("a"), nodes: map[string][]string{"n1": {BindConflict}, "n2": nil}},
		{name: "bound conflict and unbound conflict together", objs: []runtime.Object{claim("data", wffc, boundTo("pv1")), localPV("pv1", wffc, "n1", claim("data", wffc)), claim("a", wffc)},
			pod: podWith("data", "a"), nodes: map[string][]string{"n2": {NodeConflict, BindConflict}}},
	}
	rwop := func(c *corev1.PersistentVolumeClaim) {
		c.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOncePod}
	}
	tests = append(tests, []struct {
		name   string
		objs   []runtime.Object
		pod    *corev1.Pod
		used   []string
		pod403 string
		nodes  map[string][]string
	}{
		{name: "ReadWriteOncePod claim in use", objs: []runtime.Object{claim("a", dynamic, rwop)}, pod: podWith("a"), used: []string{"a"},
			nodes: map[string][]string{"n1": {InUseReadWriteOncePod}, "nb": {InUseReadWriteOncePod}}},
		{name: "ReadWriteOncePod claim free", objs: []runtime.Object{claim("a", dynamic, rwop)}, pod: podWith("a"),
			nodes: map[string][]string{"n1": nil}},
		{name: "ReadWriteOnce claim shared", objs: []runtime.Object{claim("a", dynamic)}, pod: podWith("a"), used: []string{"a"},
			nodes: map[string][]string{"n1": nil}},
	}...)
	nodes := map[string]*corev1.Node{"n1": n1, "n2": n2, "nb": nb}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, tc.objs...)
			for _, c := range tc.used {
				w.used["default/"+c] = true
			}
			v := For(tc.pod)
			if got := w.b.PodRefusal(v); got != tc.pod403 {
				t.Fatalf("pod refusal %q, want %q", got, tc.pod403)
			}
			if tc.pod403 != "" {
				if got := w.b.NodeRefusal(v, n1); len(got) != 1 || got[0] != tc.pod403 {
					t.Fatalf("node refusal %q, want the pod's %q", got, tc.pod403)
				}
				return
			}
			for name, want := range tc.nodes {
				if got := w.b.NodeRefusal(v, nodes[name]); strings.Join(got, "; ") != strings.Join(want, "; ") {
					t.Errorf("node %s: refusal %q, want %q", name, got, want)
				}
			}
		})
	}
}

func TestForAndKey(t *testing.T) {
	plain := &corev1.Pod{Spec: corev1.PodSpec{Volumes: []corev1.Volume{{Name: "cfg", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}}}
	if For(plain) != nil {
		t.Fatal("a pod without claims has rules")
	}
	if n := testing.AllocsPerRun(100, func() { For(plain) }); n != 0 {
		t.Fatalf("reading a pod without claims allocates %v times (every pod is read)", n)
	}
	a, b := podWith("data"), podWith("data")
	b.Name, b.UID = "q", "uid-q"
	if For(a).Key() != For(b).Key() {
		t.Fatal("pods sharing one claim have different keys")
	}
	e1, e2 := podWith("ephemeral:s"), podWith("ephemeral:s")
	e2.UID = "uid-other"
	if For(e1).Key() == For(e2).Key() {
		t.Fatal("ephemeral claims must key by pod")
	}
	if got := For(e1).Claims; len(got) != 1 || got[0].Name != "p-s" || !got[0].Ephemeral {
		t.Fatalf("ephemeral claim %+v", got)
	}
}

// A volume chosen for one pod is not offered to another until it is
// forgotten (a failed bind) or swept (the pod went).
func TestAssumeHoldsVolumes(t *testing.T) {
	w := newWorld(t, claim("a", wffc), claim("b", wffc), localPV("pv1", wffc, "n1", nil))
	n1 := node("n1", "a")
	pa, pb := For(podWith("a")), For(podWith("b"))
	plan, refused := w.b.Assume("default/pa", pa, n1)
	if len(refused) > 0 || plan == nil || len(plan.Static) != 1 || plan.Static[0].PV.Spec.ClaimRef.Name != "a" {
		t.Fatalf("assume: plan %+v refused %v", plan, refused)
	}
	if got := w.b.NodeRefusal(pb, n1); len(got) != 1 || got[0] != BindConflict {
		t.Fatalf("volume assumed for a offered to b: %v", got)
	}
	if _, refused := w.b.Assume("default/pb", pb, n1); len(refused) != 1 || refused[0] != BindConflict {
		t.Fatalf("b assumed a's volume: %v", refused)
	}
	// A second pod on claim a shares the volume without a write of its own.
	again, refused := w.b.Assume("default/pa2", pa, n1)
	if len(refused) > 0 || again == nil || again.Static[0].write {
		t.Fatalf("pod sharing claim a: plan %+v refused %v", again, refused)
	}
	w.b.Forget(plan)
	if got := w.b.NodeRefusal(pb, n1); got != nil {
		t.Fatalf("forgotten volume still held: %v", got)
	}
	if _, refused := w.b.Assume("default/pb", pb, n1); refused != nil {
		t.Fatalf("b: %v", refused)
	}
	if !w.b.Sweep(func(owner string) bool { return owner != "default/pb" }) || w.b.Assumed() != 0 {
		t.Fatalf("sweep kept %d", w.b.Assumed())
	}
	if got := w.b.NodeRefusal(pa, n1); got != nil {
		t.Fatalf("swept volume still held: %v", got)
	}
}

// An assumption stands for the cached object only while the cache holds
// the version it was made from.
func TestAssumptionYieldsToNewerVersion(t *testing.T) {
	pv := localPV("pv1", wffc, "n1", nil)
	pv.ResourceVersion = "10"
	w := newWorld(t, claim("a", wffc), claim("b", wffc), pv)
	n1 := node("n1", "a")
	if _, refused := w.b.Assume("default/pa", For(podWith("a")), n1); refused != nil {
		t.Fatal(refused)
	}
	// Someone else's write (a newer version, still available) wins.
	newer := pv.DeepCopy()
	newer.Labels = map[string]string{"touched": "yes"}
	if _, err := w.client.CoreV1().PersistentVolumes().Update(context.Background(), newer, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the cache sees the newer volume", func() bool {
		got, err := w.b.volumes.Get("pv1")
		return err == nil && got.ResourceVersion != "10"
	})
	if got := w.b.NodeRefusal(For(podWith("b")), n1); got != nil {
		t.Fatalf("newer version not offered: %v", got)
	}
	if w.b.Assumed() != 0 {
		t.Fatalf("stale assumption kept")
	}
}

// versioned gives volumes and claims written through client resource
// versions, with the API server's optimistic concurrency (the fake keeps
// none; the binder waits past its own writes by them).
func versioned(client *fake.Clientset) {
	var mu sync.Mutex
	next := 100
	for _, res := range []string{"persistentvolumes", "persistentvolumeclaims"} {
		client.PrependReactor("*", res, func(act k8stesting.Action) (bool, runtime.Object, error) {
			var obj runtime.Object
			switch a := act.(type) {
			case k8stesting.CreateAction:
				obj = a.GetObject()
			case k8stesting.UpdateAction:
				obj = a.GetObject()
			default:
				return false, nil, nil
			}
			m, err := meta.Accessor(obj)
			if err != nil {
				return false, nil, nil
			}
			if act.GetVerb() == "update" && m.GetResourceVersion() != "" {
				stored, err := client.Tracker().Get(act.GetResource(), act.GetNamespace(), m.GetName())
				if err == nil {
					if sm, _ := meta.Accessor(stored); sm.GetResourceVersion() != m.GetResourceVersion() {
						return true, nil, apierrors.NewConflict(act.GetResource().GroupResource(), m.GetName(), errors.New("the object has been modified"))
					}
				}
			}
			mu.Lock()
			next++
			m.SetResourceVersion(strconv.Itoa(next))
			mu.Unlock()
			return false, nil, nil
		})
	}
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

// pvController completes what Bind asked for, as kube-controller-manager's
// PV controller (static) or a provisioner (dynamic) does.
func pvController(t *testing.T, w *world, claimName, pvName string, provision bool) {
	t.Helper()
	ctx := context.Background()
	pvcs, pvs := w.client.CoreV1().PersistentVolumeClaims("default"), w.client.CoreV1().PersistentVolumes()
	eventually(t, "the scheduler's write", func() bool {
		if provision {
			c, err := pvcs.Get(ctx, claimName, metav1.GetOptions{})
			return err == nil && c.Annotations[volume.AnnSelectedNode] != ""
		}
		pv, err := pvs.Get(ctx, pvName, metav1.GetOptions{})
		return err == nil && pv.Spec.ClaimRef != nil
	})
	c, _ := pvcs.Get(ctx, claimName, metav1.GetOptions{})
	if provision {
		if _, err := pvs.Create(ctx, localPV(pvName, dynamic, c.Annotations[volume.AnnSelectedNode], c), metav1.CreateOptions{}); err != nil {
			t.Error(err)
		}
	}
	sel := c.Annotations[volume.AnnSelectedNode]
	boundTo(pvName)(c)
	if provision {
		c.Annotations[volume.AnnSelectedNode] = sel // the provisioner keeps it
	}
	if _, err := pvcs.Update(ctx, c, metav1.UpdateOptions{}); err != nil {
		t.Error(err)
	}
}

func fastWait() Wait { return Wait{Timeout: 30 * time.Second, Poll: 10 * time.Millisecond} }

func TestBindStatic(t *testing.T) {
	w := newWorld(t, claim("a", wffc), localPV("pv1", wffc, "n1", nil))
	plan, refused := w.b.Assume("default/p", For(podWith("a")), node("n1", "a"))
	if refused != nil {
		t.Fatal(refused)
	}
	go pvController(t, w, "a", "pv1", false)
	if err := plan.Bind(context.Background(), w.client, fastWait()); err != nil {
		t.Fatal(err)
	}
	pv, _ := w.client.CoreV1().PersistentVolumes().Get(context.Background(), "pv1", metav1.GetOptions{})
	if ref := pv.Spec.ClaimRef; ref == nil || ref.Name != "a" || ref.UID != "uid-a" || pv.Annotations[volume.AnnBoundByController] != "yes" {
		t.Fatalf("volume not bound to the claim as the binder binds it: %+v %v", ref, pv.Annotations)
	}
}

func TestBindProvision(t *testing.T) {
	w := newWorld(t, claim("a", dynamic))
	plan, refused := w.b.Assume("default/p", For(podWith("a")), node("n1", "a"))
	if refused != nil || len(plan.Provision) != 1 {
		t.Fatal(refused)
	}
	go pvController(t, w, "a", "pvc-a", true)
	if err := plan.Bind(context.Background(), w.client, fastWait()); err != nil {
		t.Fatal(err)
	}
	c, _ := w.client.CoreV1().PersistentVolumeClaims("default").Get(context.Background(), "a", metav1.GetOptions{})
	if c.Annotations[volume.AnnSelectedNode] != "n1" {
		t.Fatalf("selected node %q", c.Annotations[volume.AnnSelectedNode])
	}
}

func TestBindTimesOut(t *testing.T) {
	w := newWorld(t, claim("a", wffc), localPV("pv1", wffc, "n1", nil))
	plan, _ := w.b.Assume("default/p", For(podWith("a")), node("n1", "a"))
	err := plan.Bind(context.Background(), w.client, Wait{Timeout: 200 * time.Millisecond, Poll: 10 * time.Millisecond})
	if !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "persistentvolumeclaim(s) default/a not bound within 200ms") {
		t.Fatalf("err %v", err)
	}
}

func TestBindStopsWhenPodGoes(t *testing.T) {
	w := newWorld(t, claim("a", wffc), localPV("pv1", wffc, "n1", nil))
	plan, _ := w.b.Assume("default/p", For(podWith("a")), node("n1", "a"))
	err := plan.Bind(context.Background(), w.client, Wait{Timeout: 30 * time.Second, Poll: 10 * time.Millisecond, PodGone: func() bool { return true }})
	if err == nil || !strings.Contains(err.Error(), "the pod does not exist any more") {
		t.Fatalf("err %v", err)
	}
}

// The provisioner gives up by removing the selected node: Bind fails so the
// pod is placed again.
func TestBindProvisioningFailed(t *testing.T) {
	w := newWorld(t, claim("a", dynamic))
	plan, _ := w.b.Assume("default/p", For(podWith("a")), node("n1", "a"))
	go func() {
		pvcs := w.client.CoreV1().PersistentVolumeClaims("default")
		eventually(t, "selected node", func() bool {
			c, err := pvcs.Get(context.Background(), "a", metav1.GetOptions{})
			return err == nil && c.Annotations[volume.AnnSelectedNode] == "n1"
		})
		c, _ := pvcs.Get(context.Background(), "a", metav1.GetOptions{})
		delete(c.Annotations, volume.AnnSelectedNode)
		_, _ = pvcs.Update(context.Background(), c, metav1.UpdateOptions{})
	}()
	err := plan.Bind(context.Background(), w.client, fastWait())
	if err == nil || !strings.Contains(err.Error(), `provisioning failed for PVC "a"`) {
		t.Fatalf("err %v", err)
	}
}

// What a scheduler wrote before it restarted (a claimRef, a selected node)
// is found again by the rules and not written twice.
func TestRestartReusesWrites(t *testing.T) {
	a, b := claim("a", wffc), claim("b", dynamic, selected("n1"))
	w := newWorld(t, a, b, localPV("pv1", wffc, "n1", a), localPV("pv2", wffc, "n1", nil))
	// pv1 carries a's claimRef, phase Bound: the PV controller has not bound
	// the claim yet. It is offered to a alone.
	plan, refused := w.b.Assume("default/p", For(podWith("a", "b")), node("n1", "a"))
	if refused != nil {
		t.Fatal(refused)
	}
	if len(plan.Static) != 1 || plan.Static[0].PV.Name != "pv1" || plan.Static[0].write || len(plan.Provision) != 1 || plan.Provision[0].write {
		t.Fatalf("plan %+v", plan)
	}
	if got := w.b.NodeRefusal(For(podWith("a", "b")), node("n2", "a")); len(got) != 1 || got[0] != BindConflict {
		t.Fatalf("n2: %v", got)
	}
	w.client.ClearActions()
	go func() {
		pvController(t, w, "a", "pv1", false)
		pvController(t, w, "b", "pvc-b", true)
	}()
	if err := plan.Bind(context.Background(), w.client, fastWait()); err != nil {
		t.Fatal(err)
	}
	for _, act := range w.client.Actions() {
		if act.GetVerb() == "update" && (act.GetResource().Resource == "persistentvolumes" && act.(interface{ GetObject() runtime.Object }).GetObject().(*corev1.PersistentVolume).Name == "pv1") {
			t.Fatalf("pv1 written again")
		}
	}
}

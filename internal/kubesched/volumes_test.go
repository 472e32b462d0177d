package kubesched

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ktypes "k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/component-helpers/storage/volume"
	"k8s.io/utils/ptr"

	cfgv1 "github.com/tessera-gpu/tessera/api/config/v1"
	"github.com/tessera-gpu/tessera/internal/kubesched/translate"
	"github.com/tessera-gpu/tessera/internal/kubesched/volumes"
)

// storage adds to the fake API server what the volume binder needs: resource
// versions with optimistic concurrency on volumes and claims, a
// WaitForFirstConsumer class "local" (no provisioner) and an Immediate one,
// and labelled GPU nodes.
func (a *api) storage() {
	a.t.Helper()
	var mu sync.Mutex
	next := 100
	for _, res := range []string{"persistentvolumes", "persistentvolumeclaims"} {
		a.client.PrependReactor("*", res, func(act k8stesting.Action) (bool, runtime.Object, error) {
			var obj runtime.Object
			switch x := act.(type) {
			case k8stesting.CreateAction:
				obj = x.GetObject()
			case k8stesting.UpdateAction:
				obj = x.GetObject()
			default:
				return false, nil, nil
			}
			m, err := meta.Accessor(obj)
			if err != nil {
				return false, nil, nil
			}
			if act.GetVerb() == "update" {
				if stored, err := a.client.Tracker().Get(act.GetResource(), act.GetNamespace(), m.GetName()); err == nil {
					if sm, _ := meta.Accessor(stored); m.GetResourceVersion() != "" && sm.GetResourceVersion() != m.GetResourceVersion() {
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
	for name, mode := range map[string]storagev1.VolumeBindingMode{"local": storagev1.VolumeBindingWaitForFirstConsumer, "fast": storagev1.VolumeBindingImmediate} {
		sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: volume.NotSupportedProvisioner, VolumeBindingMode: ptr.To(mode)}
		if _, err := a.client.StorageV1().StorageClasses().Create(context.Background(), sc, metav1.CreateOptions{}); err != nil {
			a.t.Fatal(err)
		}
	}
}

func (a *api) labelledGPUNode(name string) {
	a.t.Helper()
	a.gpuNode(name, 1, 16*gib, "T4")
	n, err := a.client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		a.t.Fatal(err)
	}
	n.Labels = map[string]string{corev1.LabelHostname: name}
	if _, err := a.client.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		a.t.Fatal(err)
	}
}

func (a *api) claim(name, class string) {
	a.t.Helper()
	c := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: ktypes.UID("uid-pvc-" + name)},
		Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: ptr.To(class), AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
	if _, err := a.client.CoreV1().PersistentVolumeClaims("default").Create(context.Background(), c, metav1.CreateOptions{}); err != nil {
		a.t.Fatal(err)
	}
}

// localVolume is an available volume of class on host.
func (a *api) localVolume(name, class, host string) {
	a.t.Helper()
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{StorageClassName: class, AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("5Gi")},
			PersistentVolumeSource: corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: "/mnt/" + name}},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{host}}}}}}}},
		Status: corev1.PersistentVolumeStatus{Phase: corev1.VolumeAvailable}}
	if _, err := a.client.CoreV1().PersistentVolumes().Create(context.Background(), pv, metav1.CreateOptions{}); err != nil {
		a.t.Fatal(err)
	}
}

// bindClaim does what the PV controller does for a volume whose claimRef
// names a claim (or binds the claim to pv itself): the claim is bound.
func (a *api) bindClaim(claim, pv string) {
	a.t.Helper()
	ctx := context.Background()
	v, err := a.client.CoreV1().PersistentVolumes().Get(ctx, pv, metav1.GetOptions{})
	if err != nil {
		a.t.Fatal(err)
	}
	c, err := a.client.CoreV1().PersistentVolumeClaims("default").Get(ctx, claim, metav1.GetOptions{})
	if err != nil {
		a.t.Fatal(err)
	}
	if v.Spec.ClaimRef == nil {
		v.Spec.ClaimRef = &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: "default", Name: claim, UID: c.UID}
	}
	v.Status.Phase = corev1.VolumeBound
	if _, err := a.client.CoreV1().PersistentVolumes().Update(ctx, v, metav1.UpdateOptions{}); err != nil {
		a.t.Fatal(err)
	}
	c.Spec.VolumeName = pv
	metav1.SetMetaDataAnnotation(&c.ObjectMeta, volume.AnnBindCompleted, "yes")
	c.Status.Phase = corev1.ClaimBound
	if _, err := a.client.CoreV1().PersistentVolumeClaims("default").Update(ctx, c, metav1.UpdateOptions{}); err != nil {
		a.t.Fatal(err)
	}
}

func (a *api) claimRef(pv string) string {
	v, err := a.client.CoreV1().PersistentVolumes().Get(context.Background(), pv, metav1.GetOptions{})
	if err != nil || v.Spec.ClaimRef == nil {
		return ""
	}
	return v.Spec.ClaimRef.Name
}

func withClaims(claims ...string) podOpt {
	return func(p *corev1.Pod) {
		for _, c := range claims {
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: c, VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: c}}})
		}
	}
}

func oneGPU() podOpt { return res(string(translate.ResourceGPU), "1") }

// A WaitForFirstConsumer claim with a local volume on one GPU node: the pod
// goes there, the volume's claimRef is written, and the pod is bound only
// once the PV controller has bound the claim.
func TestVolumeWaitForFirstConsumerLocal(t *testing.T) {
	a := newAPI(t)
	a.storage()
	a.labelledGPUNode("n1")
	a.labelledGPUNode("n2")
	a.claim("data", "local")
	a.localVolume("pv-n2", "local", "n2")
	a.start(testConfig())
	a.pod("train", oneGPU(), withClaims("data"))
	eventually(t, "pv-n2 pre-bound to the claim", func() bool { return a.claimRef("pv-n2") == "data" })
	if n := a.get("train").Spec.NodeName; n != "" {
		t.Fatalf("pod bound to %s before its claim", n)
	}
	a.bindClaim("data", "pv-n2")
	eventually(t, "train bound", func() bool { return a.get("train").Spec.NodeName != "" })
	if n := a.get("train").Spec.NodeName; n != "n2" {
		t.Fatalf("train bound to %s, not to the node of its volume", n)
	}
}

// A claim bound to a volume on a full node: the pod waits with
// kube-scheduler's words for both nodes.
func TestVolumeBoundElsewhereIsRefused(t *testing.T) {
	a := newAPI(t)
	a.storage()
	a.labelledGPUNode("n1")
	a.labelledGPUNode("n2")
	a.claim("data", "local")
	a.localVolume("pv-n1", "local", "n1")
	a.bindClaim("data", "pv-n1")
	a.pod("hog", oneGPU(), onNode("n1"), ann("tessera.io/assignment", `{"version":"v1","containers":[{"name":"main","gpus":[{"uuid":"GPU-n1-0"}]}]}`))
	a.start(testConfig())
	a.pod("train", oneGPU(), withClaims("data"))
	want := "0/2 nodes are available: 1 Insufficient tessera.io/gpu, 1 " + volumes.NodeConflict + "."
	eventually(t, "the volume's refusal in the condition", func() bool {
		c := podScheduled(a.get("train"))
		return c != nil && c.Reason == corev1.PodReasonUnschedulable && c.Message == want
	})
	eventually(t, "the volume's refusal in an event", func() bool { return a.eventFor("train", "FailedScheduling", want) })
	if n := a.get("train").Spec.NodeName; n != "" {
		t.Fatalf("bound to %s", n)
	}
}

func podScheduled(p *corev1.Pod) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == corev1.PodScheduled {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// An unbound Immediate claim holds the pod with kube-scheduler's words
// until the PV controller binds it; the claim's update wakes the pod. A
// missing claim is named.
func TestVolumeImmediateWaitsForTheController(t *testing.T) {
	a := newAPI(t)
	a.storage()
	a.labelledGPUNode("n1")
	a.claim("data", "fast")
	a.start(testConfig())
	a.pod("train", oneGPU(), withClaims("data"))
	a.pod("orphan", oneGPU(), withClaims("nothere"))
	eventually(t, "train's refusal", func() bool {
		return a.eventFor("train", "FailedScheduling", "0/1 nodes are available: "+volumes.UnboundImmediate+".")
	})
	eventually(t, "orphan's refusal", func() bool {
		return a.eventFor("orphan", "FailedScheduling", `0/1 nodes are available: persistentvolumeclaim "nothere" not found.`)
	})
	a.localVolume("pv-n1", "fast", "n1")
	a.bindClaim("data", "pv-n1")
	eventually(t, "train bound once its claim is", func() bool { return a.get("train").Spec.NodeName == "n1" })
	if n := a.get("orphan").Spec.NodeName; n != "" {
		t.Fatalf("orphan bound to %s", n)
	}
}

// Two pods whose claims can each use the one volume: one gets it, the
// other waits for another volume (never both on the same one).
func TestVolumeNotTakenTwice(t *testing.T) {
	a := newAPI(t)
	a.storage()
	a.labelledGPUNode("n1")
	a.labelledGPUNode("n2")
	a.claim("a", "local")
	a.claim("b", "local")
	a.localVolume("pv-n1", "local", "n1")
	a.start(testConfig())
	a.pod("pa", oneGPU(), withClaims("a"))
	a.pod("pb", oneGPU(), withClaims("b"))
	eventually(t, "pv-n1 pre-bound", func() bool { return a.claimRef("pv-n1") != "" })
	winner := a.claimRef("pv-n1")
	loser := map[string]string{"a": "pb", "b": "pa"}[winner]
	eventually(t, "the other pod refused", func() bool {
		return a.eventFor(loser, "FailedScheduling", volumes.BindConflict)
	})
	a.bindClaim(winner, "pv-n1")
	eventually(t, "the winner bound", func() bool { return a.get(map[string]string{"a": "pa", "b": "pb"}[winner]).Spec.NodeName == "n1" })
	if a.claimRef("pv-n1") != winner || a.get(loser).Spec.NodeName != "" {
		t.Fatalf("volume re-assigned or loser bound")
	}
}

// The PV controller never binds: the pre-bind gives up after
// volumeBindTimeout, says so, rolls the placement back and the pod is tried
// again; the claimRef written is reused, not written twice.
func TestVolumeBindTimeout(t *testing.T) {
	a := newAPI(t)
	a.storage()
	a.labelledGPUNode("n1")
	a.claim("data", "local")
	a.localVolume("pv-n1", "local", "n1")
	var pvWrites int
	var mu sync.Mutex
	a.client.PrependReactor("update", "persistentvolumes", func(k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		pvWrites++
		mu.Unlock()
		return false, nil, nil
	})
	cfg := testConfig()
	cfg.VolumeBindTimeout = cfgv1.Duration{Duration: time.Second}
	r := a.start(cfg)
	a.pod("train", oneGPU(), withClaims("data"))
	eventually(t, "the timeout's event", func() bool {
		for _, e := range a.events("FailedScheduling") {
			if e.InvolvedObject.Name == "train" && strings.Contains(e.Message, "persistentvolumeclaim(s) default/data not bound within 1s") &&
				strings.Contains(e.Message, "the placement was rolled back") {
				return true
			}
		}
		return false
	})
	// Tried again after the backoff (1 s): the volume is still the claim's.
	time.Sleep(1500 * time.Millisecond)
	a.bindClaim("data", "pv-n1")
	eventually(t, "train bound", func() bool { return a.get("train").Spec.NodeName == "n1" })
	// The bind histogram times Bindings: one here. The pre-bind that waited
	// out its timeout for the PV controller is not a bind call.
	eventually(t, "the Binding observed", func() bool { return histogramCount(t, r.s.metrics.BindLatency) >= 1 })
	if n := histogramCount(t, r.s.metrics.BindLatency); n != 1 {
		t.Errorf("bind_duration_seconds has %d observations, want 1 (the Binding, not the timed-out pre-bind)", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if pvWrites != 2 { // the binder's claimRef, the test's PV controller
		t.Fatalf("pv-n1 written %d times", pvWrites)
	}
}

// histogramCount is how many observations histogram h has.
func histogramCount(t *testing.T, h prometheus.Histogram) uint64 {
	t.Helper()
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}

// countWrites counts updates of resource ("persistentvolumes",
// "persistentvolumeclaims") through the fake.
func (a *api) countWrites(resource string) func() int {
	var mu sync.Mutex
	n := 0
	a.client.PrependReactor("update", resource, func(act k8stesting.Action) (bool, runtime.Object, error) {
		if act.GetSubresource() == "" {
			mu.Lock()
			n++
			mu.Unlock()
		}
		return false, nil, nil
	})
	return func() int {
		mu.Lock()
		defer mu.Unlock()
		return n
	}
}

// A scheduler that dies after it pre-bound the volume (claimRef written,
// the claim not bound yet): its successor finds the same volume by the
// claimRef, writes nothing again, and binds the pod once the claim is.
func TestVolumeRestartMidPreBind(t *testing.T) {
	a := newAPI(t)
	a.storage()
	a.labelledGPUNode("n1")
	a.labelledGPUNode("n2")
	a.claim("data", "local")
	a.localVolume("pv-n2", "local", "n2")
	a.localVolume("pv-n1", "local", "n1")
	pvWrites := a.countWrites("persistentvolumes")
	first := a.start(testConfig())
	a.pod("train", oneGPU(), withClaims("data"))
	eventually(t, "a volume pre-bound to the claim", func() bool { return a.claimRef("pv-n1") == "data" || a.claimRef("pv-n2") == "data" })
	chosen, node := "pv-n1", "n1"
	if a.claimRef("pv-n2") == "data" {
		chosen, node = "pv-n2", "n2"
	}
	first.stop()
	a.start(testConfig())
	// Time for the successor to place the pod and wait on the claim itself
	// (under load it may find the claim bound already; the writes counted
	// below hold either way).
	time.Sleep(time.Second)
	a.bindClaim("data", chosen)
	eventually(t, "train bound", func() bool { return a.get("train").Spec.NodeName != "" })
	if got := a.get("train").Spec.NodeName; got != node {
		t.Fatalf("train bound to %s, its volume %s is on %s", got, chosen, node)
	}
	if got := pvWrites(); got != 2 { // the first scheduler's claimRef, the test's PV controller
		t.Fatalf("%d volume writes, want 2", got)
	}
	if other := map[string]string{"pv-n1": "pv-n2", "pv-n2": "pv-n1"}[chosen]; a.claimRef(other) != "" {
		t.Fatalf("%s taken too", other)
	}
	if got := a.bindsOf("default/train"); got != 1 {
		t.Fatalf("train bound %d times", got)
	}
}

// A WaitForFirstConsumer claim of a class that provisions where its
// allowedTopologies say: the node is chosen there and written on the claim
// (once, across a restart), and the pod is bound once the provisioned
// volume is.
func TestVolumeDynamicProvisioning(t *testing.T) {
	a := newAPI(t)
	a.storage()
	a.labelledGPUNode("n1")
	a.labelledGPUNode("n2")
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "csi"}, Provisioner: "csi.example.com", VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer),
		AllowedTopologies: []corev1.TopologySelectorTerm{{MatchLabelExpressions: []corev1.TopologySelectorLabelRequirement{{Key: corev1.LabelHostname, Values: []string{"n2"}}}}}}
	if _, err := a.client.StorageV1().StorageClasses().Create(context.Background(), sc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	a.claim("scratch", "csi")
	claimWrites := a.countWrites("persistentvolumeclaims")
	first := a.start(testConfig())
	a.pod("train", oneGPU(), withClaims("scratch"))
	selectedNode := func() string {
		c, err := a.client.CoreV1().PersistentVolumeClaims("default").Get(context.Background(), "scratch", metav1.GetOptions{})
		if err != nil {
			return ""
		}
		return c.Annotations[volume.AnnSelectedNode]
	}
	eventually(t, "the node selected for provisioning", func() bool { return selectedNode() != "" })
	if got := selectedNode(); got != "n2" {
		t.Fatalf("selected node %q, want n2 (the class's allowedTopologies)", got)
	}
	first.stop()
	a.start(testConfig())
	time.Sleep(time.Second)                   // the successor places the pod and waits on the claim
	a.localVolume("pvc-scratch", "csi", "n2") // the provisioner's volume
	a.bindClaim("scratch", "pvc-scratch")
	eventually(t, "train bound", func() bool { return a.get("train").Spec.NodeName != "" })
	if got := a.get("train").Spec.NodeName; got != "n2" {
		t.Fatalf("train bound to %s", got)
	}
	if got := claimWrites(); got != 2 { // the selected node, once; the test's binding
		t.Fatalf("%d claim writes, want 2", got)
	}
}

// A ReadWriteOncePod claim mounted by a pod on a node (of any scheduler)
// refuses every node to another pod (kube-scheduler's VolumeRestrictions);
// when that pod goes, the waiting pod is tried again and bound. Two of
// tessera's pods on one such claim: one is bound, the other waits.
func TestVolumeReadWriteOncePod(t *testing.T) {
	a := newAPI(t)
	a.storage()
	a.labelledGPUNode("n1")
	a.labelledGPUNode("n2")
	c := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "solo", UID: "uid-solo"},
		Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: ptr.To("local"), AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOncePod},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
	if _, err := a.client.CoreV1().PersistentVolumeClaims("default").Create(context.Background(), c, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	a.localVolume("pv-n1", "local", "n1")
	a.bindClaim("solo", "pv-n1")
	a.pod("holder", onNode("n1"), scheduler("default-scheduler"), withClaims("solo"))
	a.start(testConfig())
	a.pod("train", oneGPU(), withClaims("solo"))
	want := "0/2 nodes are available: 2 " + volumes.InUseReadWriteOncePod + "."
	eventually(t, "train refused", func() bool { return a.eventFor("train", "FailedScheduling", want) })
	a.deletePod("holder")
	eventually(t, "train bound once holder is gone", func() bool { return a.get("train").Spec.NodeName == "n1" })
	a.deletePod("train")
	a.pod("t1", oneGPU(), withClaims("solo"))
	a.pod("t2", oneGPU(), withClaims("solo"))
	eventually(t, "one of t1, t2 bound, the other refused", func() bool {
		n1, n2 := a.get("t1").Spec.NodeName, a.get("t2").Spec.NodeName
		return (n1 != "" && n2 == "" && a.eventFor("t2", "FailedScheduling", volumes.InUseReadWriteOncePod)) ||
			(n2 != "" && n1 == "" && a.eventFor("t1", "FailedScheduling", volumes.InUseReadWriteOncePod))
	})
	if a.get("t1").Spec.NodeName != "" && a.get("t2").Spec.NodeName != "" {
		t.Fatal("both pods bound on one ReadWriteOncePod claim")
	}
}

// A placement undone while its volumes are being bound (here its node
// left, and the rebuild queued the pod again): when the PV controller then
// binds the claim, the pre-bind that was in flight must not send the
// Binding of the placement that no longer stands.
func TestVolumePreBindOfUndonePlacementSendsNoBinding(t *testing.T) {
	a := newAPI(t)
	a.storage()
	a.labelledGPUNode("n1")
	a.claim("data", "local")
	a.localVolume("pv-n1", "local", "n1")
	a.start(testConfig())
	a.pod("train", oneGPU(), withClaims("data"))
	eventually(t, "pv-n1 pre-bound to the claim", func() bool { return a.claimRef("pv-n1") == "data" })
	if err := a.client.CoreV1().Nodes().Delete(context.Background(), "n1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "train queued again without its node", func() bool {
		c := podScheduled(a.get("train"))
		return c != nil && strings.Contains(c.Message, "0/0 nodes")
	})
	a.bindClaim("data", "pv-n1")
	time.Sleep(3 * time.Second) // the pre-bind polls its caches every second
	if got := a.get("train").Spec.NodeName; got != "" {
		t.Fatalf("train bound to %s, a node that left while its volumes were bound", got)
	}
}

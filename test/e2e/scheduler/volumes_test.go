package scheduler

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/tessera-gpu/tessera/internal/kubesched/volumes"
	"github.com/tessera-gpu/tessera/test/e2e/cluster"
	"github.com/tessera-gpu/tessera/test/e2e/controlplane"
	"github.com/tessera-gpu/tessera/test/e2e/kwoknodes"
	"github.com/tessera-gpu/tessera/test/e2e/tesserascheduler"
	"github.com/tessera-gpu/tessera/test/e2e/workload"
)

// PersistentVolumeClaims on a real API server with the real PV controller
// (kube-controller-manager): a WaitForFirstConsumer claim whose only volume
// is local to one GPU node takes the pod there and is bound by the
// controller once tessera has pre-bound the volume; a claim bound to a
// volume on a node without a free GPU leaves its pod waiting with the
// volume's reason; an unbound Immediate claim holds its pod until a volume
// appears and the controller binds it.
func TestVolumes(t *testing.T) {
	nodes := kwoknodes.UniformNodes("vol", 3, kwoknodes.L4, 1)
	for i := range nodes {
		nodes[i].Labels = map[string]string{corev1.LabelHostname: nodes[i].Name}
	}
	n1, n2 := nodes[1].Name, nodes[2].Name
	// The controller's periodic claim sync (15 s by default) binds Immediate
	// claims to volumes created after them; shorter keeps the test short.
	c := cluster.Start(t, cluster.Options{Nodes: nodes, ControlPlane: controlplane.Options{ControllerManagerArgs: []string{"--pvclaimbinder-sync-period=2s"}}})
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	t.Cleanup(cancel)
	client := c.Client()
	for name, mode := range map[string]storagev1.VolumeBindingMode{"local-wffc": storagev1.VolumeBindingWaitForFirstConsumer, "local-immediate": storagev1.VolumeBindingImmediate} {
		sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: "kubernetes.io/no-provisioner", VolumeBindingMode: &mode}
		if _, err := client.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	startScheduler(t, ctx, c, tesserascheduler.Options{})

	// WaitForFirstConsumer: the volume on n1 decides.
	mustCreatePV(t, ctx, client, localVolume("data-n1", "local-wffc", n1))
	mustCreatePVC(t, ctx, client, pvc("data", "local-wffc", ""))
	create(t, ctx, c, withClaim(workload.WholeGPUPod(ns, "trainer", workload.TesseraScheduler, 1), "data"))
	eventually(t, ctx, "trainer bound", func() bool { return nodeOf(t, ctx, client, "trainer") != "" })
	if got := nodeOf(t, ctx, client, "trainer"); got != n1 {
		t.Fatalf("trainer bound to %s, want %s (its local volume's node)", got, n1)
	}
	eventually(t, ctx, "claim data bound to data-n1", func() bool { return claimBoundTo(ctx, client, "data") == "data-n1" })

	// A claim bound to a volume on n1, whose one GPU trainer holds.
	pinned := localVolume("pinned-n1", "local-wffc", n1)
	pinned.Spec.ClaimRef = &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: ns, Name: "pinned"}
	mustCreatePV(t, ctx, client, pinned)
	mustCreatePVC(t, ctx, client, pvc("pinned", "local-wffc", "pinned-n1"))
	eventually(t, ctx, "claim pinned bound by the controller", func() bool { return claimBoundTo(ctx, client, "pinned") == "pinned-n1" })
	create(t, ctx, c, withClaim(workload.WholeGPUPod(ns, "second", workload.TesseraScheduler, 1), "pinned"))
	want := "0/3 nodes are available: 1 Insufficient tessera.io/gpu, 2 " + volumes.NodeConflict + "."
	eventually(t, ctx, "second told why", func() bool { return scheduledMessage(ctx, client, "second") == want })
	if got := nodeOf(t, ctx, client, "second"); got != "" {
		t.Fatalf("second bound to %s, where its volume cannot attach", got)
	}

	// Immediate: nothing to bind to yet.
	mustCreatePVC(t, ctx, client, pvc("later", "local-immediate", ""))
	create(t, ctx, c, withClaim(workload.WholeGPUPod(ns, "waiter", workload.TesseraScheduler, 1), "later"))
	want = "0/3 nodes are available: " + volumes.UnboundImmediate + "."
	eventually(t, ctx, "waiter told why", func() bool { return scheduledMessage(ctx, client, "waiter") == want })
	mustCreatePV(t, ctx, client, localVolume("later-n2", "local-immediate", n2))
	eventually(t, ctx, "waiter bound once the controller binds its claim", func() bool { return nodeOf(t, ctx, client, "waiter") != "" })
	if got := nodeOf(t, ctx, client, "waiter"); got != n2 {
		t.Fatalf("waiter bound to %s, want %s (its volume's node)", got, n2)
	}
	if got := nodeOf(t, ctx, client, "second"); got != "" {
		t.Fatalf("second bound to %s meanwhile", got)
	}
	if got := checkCapacity(t, ctx, client); got != 2 {
		t.Fatalf("%d pods bound, want 2", got)
	}
}

func localVolume(name, class, node string) *corev1.PersistentVolume {
	return &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{StorageClassName: class, AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("10Gi")},
			PersistentVolumeSource: corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: "/mnt/" + name}},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}}}}}}}
}

func pvc(name, class, volumeName string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: &class, VolumeName: volumeName, AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
}

func withClaim(p *corev1.Pod, claim string) *corev1.Pod {
	p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: claim, VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}})
	return p
}

func mustCreatePV(t *testing.T, ctx context.Context, client kubernetes.Interface, pv *corev1.PersistentVolume) {
	t.Helper()
	if _, err := client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func mustCreatePVC(t *testing.T, ctx context.Context, client kubernetes.Interface, c *corev1.PersistentVolumeClaim) {
	t.Helper()
	if _, err := client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, c, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// claimBoundTo is the volume a claim is bound to ("" while it is not).
func claimBoundTo(ctx context.Context, client kubernetes.Interface, name string) string {
	c, err := client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil || c.Status.Phase != corev1.ClaimBound {
		return ""
	}
	return c.Spec.VolumeName
}

// scheduledMessage is the message of a pod's PodScheduled=False condition.
func scheduledMessage(ctx context.Context, client kubernetes.Interface, name string) string {
	p, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return ""
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			return strings.TrimSpace(c.Message)
		}
	}
	return ""
}

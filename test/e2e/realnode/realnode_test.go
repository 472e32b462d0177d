package realnode_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/tessera-gpu/tessera/test/e2e/controlplane"
	"github.com/tessera-gpu/tessera/test/e2e/realnode"
)

func TestMain(m *testing.M) { os.Exit(realnode.Main(m)) }

// TestRealNode: the node gets Ready; a hostNetwork pod and a bridge-network
// pod run the locally built image and print what they were told; deleting
// them removes their sandboxes and cgroups; a kubelet restart keeps the
// node Ready and a running pod untouched; teardown leaves nothing.
func TestRealNode(t *testing.T) {
	realnode.RequireNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	began := time.Now()
	cp, err := controlplane.Start(ctx, controlplane.Options{
		Logf: t.Logf,
		// Logs and exec reach the kubelet at the node IP: the node's
		// Hostname address ("realnode") resolves nowhere.
		APIServerArgs: []string{"--kubelet-preferred-address-types=InternalIP"},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range cp.Processes() {
				t.Logf("--- %s (pid %d) log tail, %s:\n%s", p.Name, p.PID, p.LogPath, p.Tail(3000))
			}
		}
		cp.Stop()
	})
	node, err := realnode.Start(ctx, cp, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(node.LogTails())
		}
		_ = node.Stop()
	})
	client := cp.Client()
	t.Logf("TIME control plane + node Ready: %v (node alone %v)", time.Since(began).Round(time.Millisecond), node.StartupTime.Round(time.Millisecond))

	host := workloadPod("host-net", "hello from the host network", true)
	created := time.Now()
	host = runPod(ctx, t, client, host)
	t.Logf("TIME hostNetwork pod create -> Running (warm node): %v", time.Since(created).Round(time.Millisecond))
	t.Logf("TIME start -> first pod Running: %v", time.Since(began).Round(time.Millisecond))
	waitLog(ctx, t, client, host.Name, "hello from the host network")
	if host.Status.PodIP != node.IP.String() {
		t.Errorf("hostNetwork pod IP %s, want the node IP %s", host.Status.PodIP, node.IP)
	}

	created = time.Now()
	bridged := runPod(ctx, t, client, workloadPod("bridge-net", "hello from the pod network", false))
	t.Logf("TIME bridge pod create -> Running: %v", time.Since(created).Round(time.Millisecond))
	waitLog(ctx, t, client, bridged.Name, "hello from the pod network")
	ip, err := netip.ParseAddr(bridged.Status.PodIP)
	if err != nil || ip == node.IP || !ip.Is4() || ip.As4()[0] != 10 || ip.As4()[1] != 244 {
		t.Errorf("bridge pod IP %q: want an address of the pod range 10.244.x.0/24", bridged.Status.PodIP)
	}

	for _, p := range []*corev1.Pod{host, bridged} {
		if len(node.PodCgroups(string(p.UID))) == 0 {
			t.Errorf("pod %s: no pod cgroup under the node's cgroup root", p.Name)
		}
		deletePod(ctx, t, client, p.Name)
	}
	waitFor(ctx, t, "pod sandboxes and cgroups removed", func() error {
		n, err := node.ReadySandboxes(ctx)
		if err != nil {
			return err
		}
		if n != 0 {
			return fmt.Errorf("%d ready sandboxes", n)
		}
		for _, p := range []*corev1.Pod{host, bridged} {
			if cg := node.PodCgroups(string(p.UID)); len(cg) > 0 {
				return fmt.Errorf("pod %s cgroups left: %v", p.Name, cg)
			}
		}
		return nil
	})

	// Kubelet restart: the node stays Ready, the running pod is not restarted.
	keep := runPod(ctx, t, client, workloadPod("survivor", "still here", false))
	restarted := time.Now()
	if err := node.RestartKubelet(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("TIME kubelet restart -> node Ready: %v", time.Since(restarted).Round(time.Millisecond))
	time.Sleep(3 * time.Second) // a sync loop of the new kubelet
	after, err := client.CoreV1().Pods("default").Get(ctx, keep.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if after.Status.Phase != corev1.PodRunning || len(after.Status.ContainerStatuses) != 1 ||
		after.Status.ContainerStatuses[0].RestartCount != 0 ||
		after.Status.ContainerStatuses[0].ContainerID != keep.Status.ContainerStatuses[0].ContainerID {
		t.Errorf("after a kubelet restart the pod is %s with statuses %+v; want Running, the same container, no restart", after.Status.Phase, after.Status.ContainerStatuses)
	}
	if err := node.Err(); err != nil {
		t.Fatal(err)
	}
	if err := node.CheckNetworkNamespace(); err != nil {
		t.Error(err)
	}

	// Teardown with a pod still running: nothing may be left.
	if err := node.Stop(); err != nil {
		t.Fatalf("teardown: %v", err)
	}
}

func workloadPod(name, say string, hostNetwork bool) *corev1.Pod {
	grace := int64(1)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeName:                      realnode.NodeName,
			HostNetwork:                   hostNetwork,
			TerminationGracePeriodSeconds: &grace,
			AutomountServiceAccountToken:  new(false),
			Containers: []corev1.Container{{
				Name: "main", Image: realnode.TestImage, ImagePullPolicy: corev1.PullNever,
				Args: []string{"-say", say},
			}},
		},
	}
}

// runPod creates p and waits until it is Running.
func runPod(ctx context.Context, t *testing.T, client kubernetes.Interface, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	if _, err := client.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var got *corev1.Pod
	waitFor(ctx, t, "pod "+p.Name+" Running", func() error {
		var err error
		got, err = client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if got.Status.Phase != corev1.PodRunning || len(got.Status.ContainerStatuses) == 0 || !got.Status.ContainerStatuses[0].Ready {
			return fmt.Errorf("phase %s, statuses %+v", got.Status.Phase, got.Status.ContainerStatuses)
		}
		return nil
	})
	return got
}

// waitLog waits until the pod's log, read through the API server from the
// kubelet, contains want.
func waitLog(ctx context.Context, t *testing.T, client kubernetes.Interface, pod, want string) {
	t.Helper()
	waitFor(ctx, t, "log of "+pod, func() error {
		b, err := client.CoreV1().Pods("default").GetLogs(pod, &corev1.PodLogOptions{}).DoRaw(ctx)
		if err != nil {
			return err
		}
		if !strings.Contains(string(b), want) {
			return fmt.Errorf("log %q lacks %q", b, want)
		}
		return nil
	})
}

func deletePod(ctx context.Context, t *testing.T, client kubernetes.Interface, name string) {
	t.Helper()
	if err := client.CoreV1().Pods("default").Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(ctx, t, "pod "+name+" gone", func() error {
		_, err := client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (%v)", err)
	})
}

// waitFor polls check every 100 ms for up to two minutes.
func waitFor(ctx context.Context, t *testing.T, what string, check func() error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		err := check()
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: %v", what, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

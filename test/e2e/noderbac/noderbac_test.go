// Package noderbac checks, on a real API server with RBAC on, that the node
// account of the checked-in manifests (deploy/manifests, rendered from the
// chart) may do what the node agent's balloon controller does with it: read a
// pod before lowering its cap, evict a borrower, publish the node's balloons.
// TestBalloonControllerMayDoItsWork makes the node agent's production API
// calls (internal/monitor/balloons/kube.go over internal/deviceplugin/kube)
// with a client certificate of the chart's ServiceAccount, under both
// renderings; TestMonitorBinaryRunsBalloons runs the vgpu-monitor binary
// itself with a token of that ServiceAccount, on a simulated GPU.
package noderbac

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"

	annv1 "github.com/tessera-gpu/tessera/api/annotations/v1"
	"github.com/tessera-gpu/tessera/internal/deviceplugin/kube"
	"github.com/tessera-gpu/tessera/internal/monitor/balloons"
	"github.com/tessera-gpu/tessera/internal/monitor/identity"
	"github.com/tessera-gpu/tessera/test/e2e/cluster"
	"github.com/tessera-gpu/tessera/test/e2e/kwoknodes"
	"github.com/tessera-gpu/tessera/test/e2e/workload"
)

// The release namespace and node account of the checked-in manifests
// (deploy/chart.Namespace, the chart's tessera.nodeName).
const (
	releaseNS   = "tessera-system"
	nodeAccount = "tessera-node"
	podNS       = "default"
)

// nodeRBAC is the node account's ServiceAccount, ClusterRole and binding in a
// checked-in manifest.
type nodeRBAC struct {
	account *corev1.ServiceAccount
	role    *rbacv1.ClusterRole
	binding *rbacv1.ClusterRoleBinding
}

func readNodeRBAC(t *testing.T, manifest string) nodeRBAC {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "..", "deploy", "manifests", manifest))
	if err != nil {
		t.Fatal(err)
	}
	var out nodeRBAC
	rd := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := rd.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", manifest, err)
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			continue // comments only, or a kind client-go does not know
		}
		switch o := obj.(type) {
		case *corev1.ServiceAccount:
			if o.Name == nodeAccount {
				out.account = o
			}
		case *rbacv1.ClusterRole:
			if o.Name == nodeAccount {
				out.role = o
			}
		case *rbacv1.ClusterRoleBinding:
			if o.Name == nodeAccount {
				out.binding = o
			}
		}
	}
	if out.account == nil || out.role == nil || out.binding == nil {
		t.Fatalf("%s: node account %s without its ServiceAccount, ClusterRole or binding: %+v", manifest, nodeAccount, out)
	}
	return out
}

// TestBalloonControllerMayDoItsWork: with the balloons rendering's RBAC
// (node.monitor.config.balloon.enabled), the node account reads an opted-in
// pod, publishes tessera.io/node-balloons and evicts a pod; with the default
// rendering's (balloons off) the read and the eviction are forbidden, which is
// what every balloon-enabled node agent met before the chart granted them.
func TestBalloonControllerMayDoItsWork(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	nodes := kwoknodes.UniformNodes("gpu", 1, kwoknodes.A100SXM80, 1)
	c := cluster.Start(t, cluster.Options{Nodes: nodes})
	admin := c.Client()
	node := nodes[0].Name

	on, off := readNodeRBAC(t, "balloons.yaml"), readNodeRBAC(t, "default.yaml")
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: releaseNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, create := range []func() error{
		func() error {
			_, err := admin.CoreV1().ServiceAccounts(releaseNS).Create(ctx, on.account, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := admin.RbacV1().ClusterRoles().Create(ctx, on.role, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, on.binding, metav1.CreateOptions{})
			return err
		},
	} {
		if err := create(); err != nil {
			t.Fatal(err)
		}
	}
	// A client certificate whose user is the ServiceAccount's name: RBAC's
	// ServiceAccount subjects match that name.
	kubeconfig, err := c.WriteKubeconfig("tessera-node", "system:serviceaccount:"+releaseNS+":"+nodeAccount,
		"system:serviceaccounts", "system:serviceaccounts:"+releaseNS)
	if err != nil {
		t.Fatal(err)
	}
	api, err := kube.NewFromKubeconfig(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	pods := &balloons.KubePods{API: api, TTL: time.Minute}
	evictor := balloons.KubeEvictor{API: api}

	owner := runningPod(t, ctx, admin, "owner", node, map[string]string{annv1.BalloonKey: "true"})
	borrower := runningPod(t, ctx, admin, "borrower", node, nil)

	// Balloons on: everything the controller does with the API server. The
	// authorizer learns of the new role and binding from its informers a moment
	// later: forbidden answers until then are waited out, any other error fails.
	var info balloons.PodInfo
	granted, cancelGranted := context.WithTimeout(ctx, time.Minute)
	defer cancelGranted()
	poll(t, granted, "the owner readable as the node account", func() bool {
		if info, err = pods.Confirm(ctx, owner); err != nil && !apierrors.IsForbidden(err) {
			t.Fatalf("balloons rendering: reading the owner before lowering its cap: %v", err)
		}
		return err == nil
	})
	if !info.OptedIn {
		t.Fatalf("owner read as %+v, want opted in", info)
	}
	pub := balloons.NodeAnnotation{API: api, Node: node}
	if err := pub.Publish(ctx, annv1.NodeBalloons{Version: annv1.Version}); err != nil {
		t.Fatalf("balloons rendering: publishing %s: %v", annv1.NodeBalloonsKey, err)
	}
	if err := evictor.Evict(ctx, borrower); err != nil {
		t.Fatalf("balloons rendering: evicting a borrower: %v", err)
	}
	poll(t, ctx, "the borrower evicted", func() bool {
		p, err := admin.CoreV1().Pods(podNS).Get(ctx, borrower.Pod, metav1.GetOptions{})
		return apierrors.IsNotFound(err) || (err == nil && p.DeletionTimestamp != nil)
	})

	// Balloons off (the default rendering's rules): the read and the eviction
	// are forbidden, so the chart's balloon value is what grants them.
	role, err := admin.RbacV1().ClusterRoles().Get(ctx, nodeAccount, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	role.Rules = off.role.Rules
	if _, err := admin.RbacV1().ClusterRoles().Update(ctx, role, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, ctx, "reading a pod forbidden without balloons", func() bool {
		_, err := pods.Confirm(ctx, owner)
		return apierrors.IsForbidden(err)
	})
	if err := evictor.Evict(ctx, owner); !apierrors.IsForbidden(err) {
		t.Fatalf("default rendering: eviction answered %v, want forbidden", err)
	}
	if err := pub.Publish(ctx, annv1.NodeBalloons{Version: annv1.Version}); err != nil {
		t.Fatalf("default rendering: publishing the node annotation (nodes patch is granted regardless): %v", err)
	}
}

// runningPod creates a pod bound to node (kwok runs it) and returns it as
// the balloon controller names its containers.
func runningPod(t *testing.T, ctx context.Context, admin kubernetes.Interface, name, node string, annotations map[string]string) identity.Owner {
	t.Helper()
	p := workload.Pod(podNS, name, "", nil)
	p.Spec.NodeName = node
	p.Annotations = annotations
	if _, err := admin.CoreV1().Pods(podNS).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return identity.Owner{Namespace: podNS, Pod: name, Container: p.Spec.Containers[0].Name}
}

// poll waits for cond (generous: a loaded 2-core machine).
func poll(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

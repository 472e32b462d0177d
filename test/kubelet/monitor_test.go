package kubelet

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/tessera-gpu/tessera/internal/monitor/identity"
	"github.com/tessera-gpu/tessera/internal/podresources"
)

// TestMonitorNamesEveryStateDirectory: the node monitor's identity, read
// from kubelet's own PodResources server over its socket, names the owner
// of every state directory the plugin made through kubelet's device
// manager, for containers holding many IDs of several resources.
func TestMonitorNamesEveryStateDirectory(t *testing.T) {
	c := newCluster(t)
	if err := os.MkdirAll(c.socketDir(), 0o755); err != nil {
		t.Fatal(err)
	}
	c.startPlugin()
	c.startKubelet()
	c.awaitCapacity(fullNode)
	t0 := time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)
	pods := []*corev1.Pod{
		shapePod("mem-core", t0, nil, map[string]limits{"c": {0, 8, 30}}),
		shapePod("two", t0.Add(time.Second), nil, map[string]limits{"learner": {0, 24, 40}, "actor": {0, 8, 20}}),
		shapePod("whole-2-capped", t0.Add(2*time.Second), nil, map[string]limits{"c": {2, 16, 100}}),
	}
	for _, p := range pods {
		c.addPod(p)
		c.admit(p)
	}
	client, err := podresources.Dial(c.podResourcesSocket())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	r := &identity.Resolver{Source: identity.FromPodResources(client)}
	if err := r.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := c.expectedStateDirs(pods) // key → "<pod>/<container> <resource>"
	if len(want) != 8 {               // four containers × (gpu-mem, gpu-core)
		t.Fatalf("expected %d state directories: %v", len(want), want)
	}
	for key, who := range want {
		o, ok := r.Owner(key)
		podCtr, _, _ := strings.Cut(who, " ")
		if !ok || o.Namespace != "default" || o.Pod+"/"+o.Container != podCtr {
			t.Errorf("%s (%s): owner %v, %v", key, who, o, ok)
		}
	}
	entries, err := os.ReadDir(filepath.Join(c.d.Builder.StateDir, "containers"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if _, ok := r.Owner(e.Name()); !ok {
			t.Errorf("state directory %s has no owner", e.Name())
		}
	}
}

package agent

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	configv1 "github.com/tessera-gpu/tessera/api/config/v1"
	"github.com/tessera-gpu/tessera/internal/monitor/containerd"
	"github.com/tessera-gpu/tessera/internal/monitor/enforce"
	"github.com/tessera-gpu/tessera/internal/monitor/events"
)

// runtimeListing is containerd as the resolver sees it: one labelled
// container whose task holds the given pids.
type runtimeListing struct {
	pids []uint32
}

func (r runtimeListing) Containers(context.Context) ([]containerd.Labelled, error) {
	return []containerd.Labelled{
		{ID: "sandbox", Labels: map[string]string{containerd.LabelPodNamespace: "team", containerd.LabelPodName: "rogue"}},
		{ID: "c1", Labels: map[string]string{containerd.LabelPodNamespace: "team", containerd.LabelPodName: "rogue",
			containerd.LabelPodUID: "uid-1", containerd.LabelContainerName: "cuda"}},
	}, nil
}

func (r runtimeListing) Pids(_ context.Context, id string) ([]uint32, error) {
	if id == "c1" {
		return r.pids, nil
	}
	return []uint32{1}, nil // the pause process: no container name, named by nothing
}

// podEvents waits for the fake API server to hold n Events and returns them.
func podEvents(t *testing.T, client *fake.Clientset, n int) []corev1.Event {
	t.Helper()
	var list *corev1.EventList
	eventually(t, 30*time.Second, "Events posted", func() bool {
		var err error
		list, err = client.CoreV1().Events("").List(context.Background(), metav1.ListOptions{})
		return err == nil && len(list.Items) >= n
	})
	return list.Items
}

// TestBypassAndKillPostEventsOnThePod: a process outside any region is named
// by containerd (task PIDs, CRI labels) although its cgroup is not in
// kubepods; the kill policy ends it because containerd places it in a pod,
// and client-go's recorder posts the detection and the kill on that pod.
func TestBypassAndKillPostEventsOnThePod(t *testing.T) {
	n := newNode(t)
	n.allocate("ns", "good", "c", map[int]uint64{0: 256 * MiB}, nil, true)
	g := n.openGPUs()
	var log syncLog
	ag := n.agentFor(slog.New(slog.NewTextHandler(&log, nil)), g, enforcing(configv1.PolicyKill))
	rogue := n.run(nil, false)
	ag.UseContainerd(&containerd.Resolver{Lister: runtimeListing{pids: []uint32{uint32(rogue.cmd.Process.Pid)}}})
	client := fake.NewClientset()
	rec := events.New(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")}, "node-a")
	defer rec.Shutdown()
	ag.UseEvents(rec)
	start(t, ag)

	rogue.ok("init")
	rogue.ok("ctx 0")
	rogue.ok("alloc r 67108864")
	select {
	case <-exited(rogue):
	case <-time.After(10 * time.Second):
		t.Fatalf("the bypassing process still runs after 10 s; log:\n%s", log.String())
	}
	reasons := map[string]corev1.Event{}
	for _, ev := range podEvents(t, client, 2) {
		reasons[ev.Reason] = ev
	}
	for _, reason := range []string{enforce.ReasonNoRegion, enforce.ReasonKilled} {
		ev, ok := reasons[reason]
		if !ok {
			t.Errorf("no %s Event; got %v", reason, reasons)
			continue
		}
		o := ev.InvolvedObject
		if o.Kind != "Pod" || o.Namespace != "team" || o.Name != "rogue" || o.FieldPath != "spec.containers{cuda}" ||
			ev.Type != corev1.EventTypeWarning || ev.Source.Component != events.Component || ev.Source.Host != "node-a" {
			t.Errorf("%s Event: %+v %+v", reason, o, ev)
		}
	}
	if !strings.Contains(log.String(), "container=team/rogue/cuda") {
		t.Errorf("log does not name the container containerd placed the process in:\n%s", log.String())
	}
}

// TestUnusableRegionPostsAnEvent: a container's region that is not a tessera
// region (foreign magic) costs it its accounting; the pod PodResources names
// gets one Event, not one per scrape.
func TestUnusableRegionPostsAnEvent(t *testing.T) {
	n := newNode(t)
	a := n.allocate("ns", "odd", "main", map[int]uint64{0: 256 * MiB}, nil, true)
	data, err := os.ReadFile(a.region)
	if err != nil {
		t.Fatal(err)
	}
	copy(data, "NOTOURS!")
	if err := os.WriteFile(a.region, data, 0o644); err != nil {
		t.Fatal(err)
	}
	ag := n.agentFor(quietLog(), nil)
	client := fake.NewClientset()
	rec := events.New(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")}, "node-a")
	defer rec.Shutdown()
	ag.UseEvents(rec)
	url := start(t, ag)
	eventually(t, 30*time.Second, "the node lease", ag.Lease.Held)
	for range 3 {
		scrape(t, url)
	}
	evs := podEvents(t, client, 1)
	time.Sleep(200 * time.Millisecond)
	evs, _ = func() ([]corev1.Event, error) {
		l, err := client.CoreV1().Events("").List(context.Background(), metav1.ListOptions{})
		return l.Items, err
	}()
	if len(evs) != 1 {
		t.Fatalf("%d Events, want 1: %+v", len(evs), evs)
	}
	ev := evs[0]
	if ev.Reason != ReasonRegionSkipped || ev.InvolvedObject.Name != "odd" || ev.InvolvedObject.Namespace != "ns" ||
		ev.Count > 1 || !strings.Contains(ev.Message, "foreign") {
		t.Errorf("Event %s on %+v ×%d: %s", ev.Reason, ev.InvolvedObject, ev.Count, ev.Message)
	}
}

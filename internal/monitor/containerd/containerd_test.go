package containerd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/tessera-gpu/tessera/internal/monitor/identity"
)

// lister is containerd's answer as a table; calls counts the Containers reads.
type lister struct {
	containers []Labelled
	pids       map[string][]uint32
	err        error
	calls      int
}

func (l *lister) Containers(context.Context) ([]Labelled, error) {
	l.calls++
	return l.containers, l.err
}

func (l *lister) Pids(_ context.Context, id string) ([]uint32, error) {
	p, ok := l.pids[id]
	if !ok {
		return nil, fmt.Errorf("task %s: %w", id, errdefs.ErrNotFound)
	}
	return p, nil
}

func kube(id, ns, pod, ctr string) Labelled {
	return Labelled{ID: id, Labels: map[string]string{LabelPodNamespace: ns, LabelPodName: pod, LabelContainerName: ctr}}
}

func TestOnlyLabelledContainersWithTasksNameProcesses(t *testing.T) {
	l := &lister{
		containers: []Labelled{
			kube("c1", "team", "p", "main"),
			{ID: "pause", Labels: map[string]string{LabelPodNamespace: "team", LabelPodName: "p"}}, // sandbox
			{ID: "ctr-made"},                  // no CRI labels
			kube("created", "team", "q", "c"), // no task
		},
		pids: map[string][]uint32{"c1": {100, 101}, "pause": {99}, "ctr-made": {200}},
	}
	r := &Resolver{Lister: l}
	for pid, want := range map[uint32]bool{100: true, 101: true, 99: false, 200: false, 300: false} {
		c, ok := r.Lookup(context.Background(), pid)
		if ok != want || (ok && c.Owner != (identity.Owner{Namespace: "team", Pod: "p", Container: "main"})) {
			t.Errorf("pid %d → %+v %v, want found=%v", pid, c, ok, want)
		}
	}
}

// An unknown pid refreshes at most once per MinAge; a known one only after
// MaxAge; a failed read keeps the last mapping. The clock is stepped: with
// the wall clock, a test descheduled for MinAge on a loaded machine would see
// a second read among lookups it meant to be within MinAge.
func TestRefreshIsBoundedAndKeepsTheMappingOnError(t *testing.T) {
	l := &lister{containers: []Labelled{kube("c1", "ns", "p", "c")}, pids: map[string][]uint32{"c1": {10}}}
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	r := &Resolver{Lister: l, MinAge: time.Second, MaxAge: time.Hour, now: func() time.Time { return now }}
	ctx := context.Background()
	r.Lookup(ctx, 10)
	for range 5 {
		now = now.Add(100 * time.Millisecond)
		r.Lookup(ctx, 10)
		r.Lookup(ctx, 11)
	}
	if l.calls != 1 {
		t.Errorf("%d reads for lookups within MinAge, want 1", l.calls)
	}
	now = now.Add(time.Second)
	l.pids["c1"] = []uint32{10, 11}
	if _, ok := r.Lookup(ctx, 11); !ok || l.calls != 2 {
		t.Errorf("a new process is not found after MinAge (reads %d)", l.calls)
	}
	if _, ok := r.Lookup(ctx, 10); !ok || l.calls != 2 {
		t.Errorf("a known pid read containerd again before MaxAge (reads %d)", l.calls)
	}
	now = now.Add(time.Second + time.Millisecond)
	l.err = errors.New("containerd restarting")
	if _, ok := r.Lookup(ctx, 12); ok {
		t.Error("unknown pid found")
	}
	if _, ok := r.Lookup(ctx, 10); !ok || r.Err() == nil {
		t.Errorf("a failed read dropped the mapping or hid its error (%v)", r.Err())
	}
	if l.calls != 3 {
		t.Errorf("%d reads after the failed one, want 3: a down containerd is asked once per MinAge", l.calls)
	}
	now = now.Add(time.Hour + time.Second)
	l.err = nil
	if _, ok := r.Lookup(ctx, 10); !ok || l.calls != 4 || r.Err() != nil {
		t.Errorf("a mapping older than MaxAge was not refreshed (reads %d, err %v)", l.calls, r.Err())
	}
}

func TestDialSaysWhenTheSocketIsAbsent(t *testing.T) {
	_, err := Dial(filepath.Join(t.TempDir(), "containerd.sock"), "k8s.io")
	if !errors.Is(err, ErrNoSocket) {
		t.Fatalf("%v, want ErrNoSocket", err)
	}
	sock := filepath.Join(t.TempDir(), "present.sock")
	if err := os.WriteFile(sock, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Dial(sock, "k8s.io")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Containers(context.Background()); err == nil {
		t.Error("a file that is no containerd answered")
	}
}

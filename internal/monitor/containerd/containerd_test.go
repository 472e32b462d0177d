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
// MaxAge; a failed read keeps the last mapping.
func TestRefreshIsBoundedAndKeepsTheMappingOnError(t *testing.T) {
	l := &lister{containers: []Labelled{kube("c1", "ns", "p", "c")}, pids: map[string][]uint32{"c1": {10}}}
	r := &Resolver{Lister: l, MinAge: 50 * time.Millisecond, MaxAge: time.Hour}
	ctx := context.Background()
	r.Lookup(ctx, 10)
	for range 5 {
		r.Lookup(ctx, 10)
		r.Lookup(ctx, 11)
	}
	if l.calls != 1 {
		t.Errorf("%d reads for lookups within MinAge, want 1", l.calls)
	}
	time.Sleep(60 * time.Millisecond)
	l.pids["c1"] = []uint32{10, 11}
	if _, ok := r.Lookup(ctx, 11); !ok || l.calls != 2 {
		t.Errorf("a new process is not found after MinAge (reads %d)", l.calls)
	}
	time.Sleep(60 * time.Millisecond)
	l.err = errors.New("containerd restarting")
	if _, ok := r.Lookup(ctx, 12); ok {
		t.Error("unknown pid found")
	}
	if _, ok := r.Lookup(ctx, 10); !ok || r.Err() == nil {
		t.Errorf("a failed read dropped the mapping or hid its error (%v)", r.Err())
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

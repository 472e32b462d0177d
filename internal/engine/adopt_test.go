package engine

import (
	"errors"
	"testing"
	"time"

	"github.com/tessera-gpu/tessera/internal/partition"
	"github.com/tessera-gpu/tessera/internal/placement"
	"github.com/tessera-gpu/tessera/internal/priority"
)

func TestAdoptBooksWithoutEventAndRefusesDoubleBooking(t *testing.T) {
	c, err := placement.NewCluster([]partition.NodeSpec{{Name: "n0", Model: "A100", CPU: 8000, MemMiB: 8192, GPUs: 1, GPUMemMiB: 40960}})
	if err != nil {
		t.Fatal(err)
	}
	pol, _ := placement.NewPolicy("bestfit", c, placement.Options{})
	e, err := New(Config{}, placement.NewScheduler(c, pol, false), nil)
	if err != nil {
		t.Fatal(err)
	}
	d := placement.Decision{Node: 0, NodeName: "n0", Grant: partition.Grant{Shares: []partition.Share{{GPU: 0, Milli: 600}}}}
	p := &Pod{Key: "a", Request: placement.Request{NumGPU: 1, GPUMilli: 600}, Class: priority.P2}
	if err := e.Adopt(p, d, time.Unix(0, 0)); err != nil {
		t.Fatal(err)
	}
	if len(e.Events()) != 0 || e.RunningCount() != 1 {
		t.Fatalf("adopt should book silently: running %d", e.RunningCount())
	}
	if err := e.Adopt(p, d, time.Unix(0, 0)); !errors.Is(err, ErrKnown) {
		t.Fatalf("adopting twice: %v", err)
	}
	q := &Pod{Key: "b", Request: placement.Request{NumGPU: 1, GPUMilli: 600}, Class: priority.P2}
	if err := e.Adopt(q, d, time.Unix(0, 0)); err == nil {
		t.Fatal("a second 600-milli share on a GPU with 400 free was adopted")
	}
	if e.RunningCount() != 1 || c.Nodes[0].GPUs[0].FreeMilli != 400 {
		t.Fatalf("refused adoption changed the books: running %d, free %d", e.RunningCount(), c.Nodes[0].GPUs[0].FreeMilli)
	}
}

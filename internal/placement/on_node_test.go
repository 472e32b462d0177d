package placement

import (
	"errors"
	"strings"
	"testing"

	"github.com/tessera-gpu/tessera/internal/partition"
)

func TestScheduleOnOneNode(t *testing.T) {
	c, err := NewCluster([]partition.NodeSpec{
		{Name: "a", Model: "A100", CPU: 8000, MemMiB: 1 << 16, GPUs: 4, GPUMemMiB: 40960, Islands: 2},
		{Name: "b", Model: "T4", CPU: 8000, MemMiB: 1 << 16, GPUs: 2, GPUMemMiB: 16384},
	})
	if err != nil {
		t.Fatal(err)
	}
	p, _ := NewPolicy("bestfit", c, Options{})
	s := NewScheduler(c, p, false)
	r := &Request{Name: "p", CPUMilli: 1000, NumGPU: 2, GPUMilli: 1000, SameIsland: true}
	d, err := s.ScheduleOn(1, r)
	if err != nil || d.Node != 1 || d.NodeName != "b" || len(d.Grant.Shares) != 2 {
		t.Fatalf("ScheduleOn(b) = %+v, %v", d, err)
	}
	if err := c.Reserve(d); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ScheduleOn(1, r); !errors.Is(err, ErrUnschedulable) || !strings.Contains(err.Error(), "gpu-share") {
		t.Errorf("full node: err = %v, want unschedulable naming gpu-share", err)
	}
	r.Models = []string{"T4"}
	if _, err := s.ScheduleOn(0, r); err == nil || !strings.Contains(err.Error(), "gpu-model") {
		t.Errorf("wrong model: err = %v", err)
	}
	r.Models = nil
	c.Cordon(0, true)
	if _, err := s.ScheduleOn(0, r); err == nil || !strings.Contains(err.Error(), "cordoned") {
		t.Errorf("cordoned: err = %v", err)
	}
	if _, err := s.ScheduleOn(7, r); err == nil {
		t.Error("no node 7 accepted")
	}
}

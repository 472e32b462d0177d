// Package trace reads cluster traces in the openb CSV format (Alibaba
// cluster-trace-gpu-v2023): a node list and a pod list. It checks every value
// and reports the first bad one by file, line and column; it knows nothing
// about scheduling.
package trace

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// Node is one row of a node list.
type Node struct {
	Name     string
	CPUMilli int64
	MemMiB   int64
	GPUs     int
	Model    string
}

// Pod is one row of a pod list. GPUMilli is the share of each GPU, 1000 being
// a whole GPU; GPUSpec lists the GPU models the pod accepts (empty: any).
type Pod struct {
	Name     string
	CPUMilli int64
	MemMiB   int64
	NumGPU   int
	GPUMilli int
	GPUSpec  []string
	// QoS is the trace's qos column (LS, Burstable, Guaranteed, BE; empty
	// when absent).
	QoS string
	// Creation, Deletion and Scheduled are the trace's times in seconds;
	// -1 when the column is absent or empty (a pod that never ran has no
	// scheduled_time).
	Creation, Deletion, Scheduled int64
}

// Limits that reject absurd values rather than let them overflow the engine.
const (
	maxCPUMilli = 100_000_000 // 100,000 cores
	maxMemMiB   = 1 << 26     // 64 TiB: above the largest single machines (openb's largest node has 1 TiB)
	maxGPUs     = 64
	maxGPUMilli = 1000
	maxTime     = 1 << 40 // seconds: far beyond any trace, far below overflow
)

// column describes one CSV column the reader understands.
type column struct {
	name     string
	required bool
}

var nodeColumns = []column{{"sn", true}, {"cpu_milli", true}, {"memory_mib", true}, {"gpu", true}, {"model", true}}

var podColumns = []column{
	{"name", true}, {"cpu_milli", true}, {"memory_mib", true}, {"num_gpu", true}, {"gpu_milli", true},
	{"gpu_spec", false}, {"qos", false}, {"pod_phase", false},
	{"creation_time", false}, {"deletion_time", false}, {"scheduled_time", false},
}

// ReadNodesFile reads a node list from a file.
func ReadNodesFile(path string) ([]Node, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadNodes(path, f)
}

// ReadPodsFile reads a pod list from a file.
func ReadPodsFile(path string) ([]Pod, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadPods(path, f)
}

// ReadNodes reads a node list; name is used in error messages.
func ReadNodes(name string, r io.Reader) ([]Node, error) {
	var nodes []Node
	seen := map[string]int{}
	err := readRows(name, r, nodeColumns, func(row *row) error {
		n := Node{Name: row.str("sn"), Model: row.str("model")}
		n.CPUMilli = row.int("cpu_milli", 0, maxCPUMilli)
		n.MemMiB = row.int("memory_mib", 0, maxMemMiB)
		n.GPUs = int(row.int("gpu", 0, maxGPUs))
		if row.err != nil {
			return row.err
		}
		if err := row.unique("sn", seen); err != nil {
			return err
		}
		if n.GPUs > 0 && n.Model == "" {
			return row.fail("model", "", "node has GPUs but no GPU model")
		}
		nodes = append(nodes, n)
		return nil
	})
	return nodes, err
}

// ReadPods reads a pod list; name is used in error messages.
func ReadPods(name string, r io.Reader) ([]Pod, error) {
	var pods []Pod
	seen := map[string]int{}
	err := readRows(name, r, podColumns, func(row *row) error {
		p := Pod{Name: row.str("name")}
		p.CPUMilli = row.int("cpu_milli", 0, maxCPUMilli)
		p.MemMiB = row.int("memory_mib", 0, maxMemMiB)
		p.NumGPU = int(row.int("num_gpu", 0, maxGPUs))
		p.GPUMilli = int(row.int("gpu_milli", 0, maxGPUMilli))
		p.QoS = row.str("qos")
		p.Creation = row.optInt("creation_time", 0, maxTime)
		p.Deletion = row.optInt("deletion_time", 0, maxTime)
		p.Scheduled = row.optInt("scheduled_time", 0, maxTime)
		if row.err != nil {
			return row.err
		}
		if err := row.unique("name", seen); err != nil {
			return err
		}
		if p.NumGPU == 0 && p.GPUMilli != 0 {
			return row.fail("gpu_milli", row.str("gpu_milli"), "a pod without GPUs cannot ask for a GPU share")
		}
		if p.NumGPU > 0 && p.GPUMilli == 0 {
			return row.fail("gpu_milli", "0", "a pod with GPUs must ask for a share above 0")
		}
		if p.NumGPU > 1 && p.GPUMilli != maxGPUMilli {
			return row.fail("gpu_milli", row.str("gpu_milli"), fmt.Sprintf("a pod with %d GPUs takes whole GPUs (%d)", p.NumGPU, maxGPUMilli))
		}
		if spec := row.str("gpu_spec"); spec != "" {
			for _, m := range strings.Split(spec, "|") {
				if m == "" {
					return row.fail("gpu_spec", spec, "empty model name in the list")
				}
				p.GPUSpec = append(p.GPUSpec, m)
			}
		}
		pods = append(pods, p)
		return nil
	})
	return pods, err
}

// row gives typed access to one record; the first failure sticks in err.
type row struct {
	file   string
	line   int
	index  map[string]int
	record []string
	err    error
}

func (r *row) str(col string) string {
	i, ok := r.index[col]
	if !ok {
		return ""
	}
	return r.record[i]
}

func (r *row) int(col string, lo, hi int64) int64 {
	if r.err != nil {
		return 0
	}
	s := r.str(col)
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		r.err = r.fail(col, s, "not an integer")
		return 0
	}
	if v < lo || v > hi {
		r.err = r.fail(col, s, fmt.Sprintf("out of range %d..%d", lo, hi))
		return 0
	}
	return v
}

// optInt is int for a column that may be absent or empty: -1 then.
func (r *row) optInt(col string, lo, hi int64) int64 {
	if r.str(col) == "" {
		return -1
	}
	return r.int(col, lo, hi)
}

// unique checks that column col holds a name not seen on an earlier line,
// and remembers it.
func (r *row) unique(col string, seen map[string]int) error {
	name := r.str(col)
	if name == "" {
		return r.fail(col, "", "empty name")
	}
	if prev, dup := seen[name]; dup {
		return r.fail(col, name, fmt.Sprintf("duplicate of line %d", prev))
	}
	seen[name] = r.line
	return nil
}

func (r *row) fail(col, value, why string) error {
	return &FieldError{File: r.file, Line: r.line, Field: col, Value: value, Reason: why}
}

// FieldError names the file, line and column of a bad value.
type FieldError struct {
	File   string
	Line   int
	Field  string
	Value  string
	Reason string
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("%s:%d: field %s=%q: %s", e.File, e.Line, e.Field, e.Value, e.Reason)
}

// readRows checks the header against the known columns and hands each
// record to fn.
func readRows(file string, r io.Reader, cols []column, fn func(*row) error) error {
	cr := csv.NewReader(r)
	cr.ReuseRecord = true
	header, err := cr.Read()
	if errors.Is(err, io.EOF) {
		return fmt.Errorf("%s:1: empty file, expected a header", file)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	index, err := checkHeader(header, cols)
	if err != nil {
		return fmt.Errorf("%s:1: %w", file, err)
	}
	cr.FieldsPerRecord = len(header)
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			// FieldPos is only valid after a successful read.
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				return fmt.Errorf("%s:%d: %w", file, pe.Line, pe.Err)
			}
			return fmt.Errorf("%s: %w", file, err)
		}
		line, _ := cr.FieldPos(0)
		if err := fn(&row{file: file, line: line, index: index, record: rec}); err != nil {
			return err
		}
	}
}

func checkHeader(header []string, cols []column) (map[string]int, error) {
	known := map[string]bool{}
	for _, c := range cols {
		known[c.name] = true
	}
	index := map[string]int{}
	for i, h := range header {
		h = strings.TrimSpace(strings.TrimPrefix(h, "\ufeff"))
		if !known[h] {
			return nil, fmt.Errorf("unknown column %q", h)
		}
		if _, dup := index[h]; dup {
			return nil, fmt.Errorf("column %q appears twice", h)
		}
		index[h] = i
	}
	for _, c := range cols {
		if _, ok := index[c.name]; c.required && !ok {
			return nil, fmt.Errorf("missing column %q", c.name)
		}
	}
	return index, nil
}

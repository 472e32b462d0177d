package trace

import (
	"os"
	"strings"
	"testing"
)

// The parsers must never panic, and whatever they accept must satisfy the
// limits the engine relies on.
func FuzzReadPods(f *testing.F) {
	f.Add("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\na,1000,10,1,500,T4|G2\n")
	f.Add("name,cpu_milli,memory_mib,num_gpu,gpu_milli\nb,0,0,0,0\nc,1,1,8,1000\n")
	f.Add("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n\"a\nb\",1,1,1,1,\n")
	f.Add("name,cpu_milli\n")
	if b, err := os.ReadFile(shipped + "openb_pod_list_default.csv"); err == nil {
		f.Add(string(b[:4096]))
	}
	f.Fuzz(func(t *testing.T, in string) {
		pods, err := ReadPods("fuzz.csv", strings.NewReader(in))
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz.csv") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		for _, p := range pods {
			if p.Name == "" || p.CPUMilli < 0 || p.MemMiB < 0 || p.NumGPU < 0 || p.NumGPU > maxGPUs ||
				p.GPUMilli < 0 || p.GPUMilli > maxGPUMilli || (p.NumGPU == 0) != (p.GPUMilli == 0) ||
				(p.NumGPU > 1 && p.GPUMilli != maxGPUMilli) {
				t.Fatalf("accepted a bad pod %+v", p)
			}
		}
	})
}

func FuzzReadNodes(f *testing.F) {
	f.Add("sn,cpu_milli,memory_mib,gpu,model\nn,96000,393216,8,G2\nm,1,1,0,\n")
	f.Add("sn,cpu_milli,memory_mib,gpu,model\nn,-1,1,1,x\n")
	f.Fuzz(func(t *testing.T, in string) {
		nodes, err := ReadNodes("fuzz.csv", strings.NewReader(in))
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz.csv") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		for _, n := range nodes {
			if n.Name == "" || n.CPUMilli < 0 || n.GPUs < 0 || n.GPUs > maxGPUs || (n.GPUs > 0 && n.Model == "") {
				t.Fatalf("accepted a bad node %+v", n)
			}
		}
	})
}

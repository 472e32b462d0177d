package trace

import (
	"errors"
	"strings"
	"testing"
)

const shipped = "../testdata/openb/"

func TestReadShippedOpenB(t *testing.T) {
	nodes, err := ReadNodesFile(shipped + "openb_node_list_gpu_node.csv")
	if err != nil {
		t.Fatal(err)
	}
	gpus := 0
	for _, n := range nodes {
		gpus += n.GPUs
	}
	if len(nodes) != 1213 || gpus != 6212 {
		t.Errorf("node list: %d nodes, %d GPUs; want 1213, 6212", len(nodes), gpus)
	}
	pods, err := ReadPodsFile(shipped + "openb_pod_list_default.csv")
	if err != nil {
		t.Fatal(err)
	}
	if len(pods) != 8152 {
		t.Errorf("pod list: %d pods, want 8152", len(pods))
	}
	if p := pods[1]; p.Name != "openb-pod-0001" || p.CPUMilli != 6000 || p.MemMiB != 12288 || p.NumGPU != 1 || p.GPUMilli != 460 {
		t.Errorf("second pod parsed as %+v", p)
	}
	if p := pods[1]; p.QoS != "LS" || p.Creation != 427061 || p.Deletion != 12902960 || p.Scheduled != 427061 {
		t.Errorf("second pod's qos and times parsed as %+v", p)
	}
	// openb-pod-0061 never ran: no scheduled_time.
	if p := pods[61]; p.Name != "openb-pod-0061" || p.Scheduled != -1 || p.Creation != 10001278 {
		t.Errorf("pending pod parsed as %+v", p)
	}
}

func TestReadPodsTimes(t *testing.T) {
	_, err := ReadPods("p.csv", strings.NewReader("name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time\na,1,1,0,0,-5\n"))
	if err == nil || !strings.Contains(err.Error(), "p.csv:2: field creation_time") {
		t.Errorf("negative time: %v", err)
	}
	pods, err := ReadPods("p.csv", strings.NewReader("name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,1,1,0,0\n"))
	if err != nil || pods[0].Creation != -1 || pods[0].Deletion != -1 || pods[0].Scheduled != -1 || pods[0].QoS != "" {
		t.Errorf("absent columns: %+v, %v", pods, err)
	}
}

func TestReadPodsWithoutOptionalColumns(t *testing.T) {
	pods, err := ReadPods("p.csv", strings.NewReader("name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,1000,10,2,1000\nb,1,1,0,0\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(pods) != 2 || pods[0].NumGPU != 2 || pods[1].GPUSpec != nil {
		t.Fatalf("got %+v", pods)
	}
	pods, err = ReadPods("p.csv", strings.NewReader("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\na,1,1,1,500,T4|V100M32\n"))
	if err != nil || len(pods[0].GPUSpec) != 2 || pods[0].GPUSpec[1] != "V100M32" {
		t.Fatalf("spec: %+v, %v", pods, err)
	}
}

func TestBadInputNamesFileLineField(t *testing.T) {
	const podHeader = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
	cases := []struct {
		name, input, want string
	}{
		{"not a number", podHeader + "a,1,1,1,500,\nb,x,1,1,500,\n", `pods.csv:3: field cpu_milli="x": not an integer`},
		{"negative", podHeader + "a,1,-5,1,500,\n", `pods.csv:2: field memory_mib="-5": out of range`},
		{"absurd share", podHeader + "a,1,1,1,1500,\n", `pods.csv:2: field gpu_milli="1500": out of range 0..1000`},
		{"absurd memory (1 PiB)", podHeader + "a,1,1073741824,1,500,\n", `pods.csv:2: field memory_mib="1073741824": out of range`},
		{"absurd gpus", podHeader + "a,1,1,100,1000,\n", `pods.csv:2: field num_gpu="100": out of range`},
		{"truncated row", podHeader + "a,1,1,1\n", `pods.csv:2: wrong number of fields`},
		{"unknown column", "name,cpu_milli,memory_mib,num_gpu,gpu_milli,colour\n", `pods.csv:1: unknown column "colour"`},
		{"missing column", "name,cpu_milli,memory_mib,num_gpu\n", `pods.csv:1: missing column "gpu_milli"`},
		{"duplicate column", "name,name,cpu_milli,memory_mib,num_gpu,gpu_milli\n", `appears twice`},
		{"empty file", "", `pods.csv:1: empty file`},
		{"duplicate pod", podHeader + "a,1,1,1,500,\na,1,1,1,500,\n", `pods.csv:3: field name="a": duplicate of line 2`},
		{"share without gpus", podHeader + "a,1,1,0,500,\n", `field gpu_milli="500": a pod without GPUs`},
		{"gpus without share", podHeader + "a,1,1,2,0,\n", `field gpu_milli="0": a pod with GPUs`},
		{"partial multi-GPU share", podHeader + "a,1,1,2,500,\n", `pods.csv:2: field gpu_milli="500": a pod with 2 GPUs takes whole GPUs`},
		{"empty model", podHeader + "a,1,1,1,500,T4||P100\n", `field gpu_spec="T4||P100": empty model name`},
		{"empty name", podHeader + ",1,1,1,500,\n", `field name="": empty name`},
		{"bad quote", podHeader + "a,\"1,1,1,500,\n", `pods.csv:2:`},
	}
	for _, c := range cases {
		_, err := ReadPods("pods.csv", strings.NewReader(c.input))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want it to contain %q", c.name, err, c.want)
		}
	}
}

func TestBadNodeRows(t *testing.T) {
	const h = "sn,cpu_milli,memory_mib,gpu,model\n"
	cases := []struct{ input, want string }{
		{h + "n1,96000,1000,8,\n", `nodes.csv:2: field model="": node has GPUs but no GPU model`},
		{h + "n1,96000,1000,8,G2\nn1,1,1,0,\n", `nodes.csv:3: field sn="n1": duplicate of line 2`},
		{h + "n1,96000,1000,65,G2\n", `field gpu="65": out of range 0..64`},
		{h + "n1,99999999999,1000,1,G2\n", `field cpu_milli="99999999999": out of range`},
	}
	for _, c := range cases {
		_, err := ReadNodes("nodes.csv", strings.NewReader(c.input))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: err = %v, want %q", c.input, err, c.want)
		}
	}
	var fe *FieldError
	_, err := ReadNodes("nodes.csv", strings.NewReader(cases[0].input))
	if !errors.As(err, &fe) || fe.Line != 2 || fe.Field != "model" {
		t.Errorf("error is not a FieldError with line and field: %#v", err)
	}
}

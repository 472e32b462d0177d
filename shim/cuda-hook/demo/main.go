// Command demo shows the CUDA hook at work on the simulated GPU: two containers'
// processes share one GPU, one of them capped; it is refused cleanly past its cap,
// sees only its slice, has its cap raised while it runs, and is killed, after which
// its usage is reclaimed. It prints a readable account; `make demo` runs it.
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/tessera-gpu/tessera/internal/region"
	"github.com/tessera-gpu/tessera/test/cudash"
)

const gib = 1 << 30

func main() {
	lib := flag.String("lib", "lib", "directory holding libtessera-hook.so and fakegpu/")
	cudash := flag.String("cudash", "build/hook/cudash", "the cudash test driver")
	flag.Parse()
	log.SetFlags(0)
	dir, err := os.MkdirTemp("", "tessera-demo-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	d := &demo{lib: *lib, cudash: *cudash, dir: dir}
	if err := d.run(); err != nil {
		log.Fatalf("demo failed: %v", err)
	}
}

type demo struct {
	lib, cudash, dir string
}

// start runs cudash as one program, under the hook when hooked, on the
// simulated driver.
func (d *demo) start(name string, env []string, hooked bool) (*cudash.Shell, error) {
	full := []string{
		"LD_LIBRARY_PATH=" + filepath.Join(d.lib, "fakegpu"),
		"FAKEGPU_STATE=" + filepath.Join(d.dir, "fakegpu.state"),
		"TESSERA_LOG=error",
	}
	full = append(full, env...)
	if hooked {
		full = append(full, cudash.HookEnv(d.lib))
	}
	return cudash.Start(name, d.cudash, full, "-mode", "dlsym")
}

func gb(b uint64) string { return fmt.Sprintf("%.2f GiB", float64(b)/gib) }

// container writes the two files the device plugin gives a container.
func (d *demo) container(name, uuid string, capBytes uint64) ([]string, string, string, error) {
	regionPath := filepath.Join(d.dir, name+".region")
	limitsPath := filepath.Join(d.dir, name+".limits")
	if err := region.WriteLimits(limitsPath, []region.DeviceLimit{{UUID: uuid, MemLimitBytes: capBytes}}); err != nil {
		return nil, "", "", err
	}
	if err := region.CreateRegion(regionPath); err != nil {
		return nil, "", "", err
	}
	return []string{"TESSERA_REGION=" + regionPath, "TESSERA_LIMITS=" + limitsPath}, regionPath, limitsPath, nil
}

// alloc tries one allocation and narrates the outcome.
func alloc(p *cudash.Shell, name string, bytes uint64) error {
	out, err := p.Do(fmt.Sprintf("alloc %s %d", name, bytes))
	if err != nil {
		return err
	}
	info, err := p.Must("info")
	if err != nil {
		return err
	}
	used := cudash.Value(info, "total") - cudash.Value(info, "free")
	if strings.HasPrefix(out, "ok") {
		fmt.Printf("  %-7s cuMemAlloc(%s) -> CUDA_SUCCESS; it now sees %s used of %s\n", p.Name, gb(bytes),
			gb(used), gb(cudash.Value(info, "total")))
		return nil
	}
	fmt.Printf("  %-7s cuMemAlloc(%s) -> %s; nothing was allocated, it still has %s of %s\n", p.Name,
		gb(bytes), strings.Fields(out)[2], gb(used), gb(cudash.Value(info, "total")))
	return nil
}

func (d *demo) run() error {
	probe, err := d.start("probe", nil, false)
	if err != nil {
		return err
	}
	if _, err := probe.Must("init"); err != nil {
		return err
	}
	u, err := probe.Must("uuid 0")
	if err != nil {
		return err
	}
	uuid := strings.TrimPrefix(strings.Fields(u)[1], "uuid=")
	phys, _ := probe.Must("total 0")
	fmt.Printf("tessera hook demo: one simulated NVIDIA H200 (%s, %s)\n\n", gb(cudash.Value(phys, "total")), uuid)

	envA, regionA, limitsA, err := d.container("team-a", uuid, 8*gib)
	if err != nil {
		return err
	}
	envB, _, _, err := d.container("team-b", uuid, 0)
	if err != nil {
		return err
	}
	fmt.Println("The device plugin gave two containers this GPU:")
	fmt.Println("  team-a  memory cap 8 GiB")
	fmt.Println("  team-b  no memory cap (its limit is 0: the hook passes it through)")
	fmt.Println()

	a, err := d.start("team-a", envA, true)
	if err != nil {
		return err
	}
	b, err := d.start("team-b", envB, true)
	if err != nil {
		return err
	}
	for _, p := range []*cudash.Shell{a, b} {
		for _, c := range []string{"init", "ctx 0"} {
			if _, err := p.Must(c); err != nil {
				return err
			}
		}
	}
	infoA, _ := a.Must("info")
	infoB, _ := b.Must("info")
	fmt.Println("What each process sees (cuMemGetInfo):")
	fmt.Printf("  team-a  total %s, free %s\n", gb(cudash.Value(infoA, "total")), gb(cudash.Value(infoA, "free")))
	fmt.Printf("  team-b  total %s, free %s\n\n", gb(cudash.Value(infoB, "total")), gb(cudash.Value(infoB, "free")))

	fmt.Println("Both allocate:")
	steps := []struct {
		p     *cudash.Shell
		name  string
		bytes uint64
	}{{a, "a1", 3 * gib}, {a, "a2", 3 * gib}, {b, "b1", 20 * gib}, {a, "a3", 3 * gib}, {a, "a4", 2 * gib}}
	for _, s := range steps {
		if err := alloc(s.p, s.name, s.bytes); err != nil {
			return err
		}
	}
	nv, _ := probe.Must("nvml 0")
	fmt.Printf("\nThe node's view (NVML, no hook): %s of %s in use on the GPU\n", gb(cudash.Value(nv, "used")),
		gb(cudash.Value(nv, "total")))

	r, err := region.OpenRegion(regionA)
	if err != nil {
		return err
	}
	defer r.Close()
	usage := r.Usage()
	fmt.Printf("team-a's accounting region: %s used, peak %s, %d allocation refused, %d process(es)\n\n",
		gb(usage.UsedBytes[0]), gb(usage.PeakBytes[0]), usage.Refused[0], len(usage.Procs))

	fmt.Println("The node agent raises team-a's cap to 12 GiB while it runs:")
	l, err := region.OpenLimits(limitsA)
	if err != nil {
		return err
	}
	defer l.Close()
	if err := l.SetMemLimit(uuid, 12*gib); err != nil {
		return err
	}
	if err := alloc(a, "a5", 3*gib); err != nil {
		return err
	}

	fmt.Printf("\nteam-a's process (pid %d) is killed with SIGKILL while holding %s.\n", a.Pid(),
		gb(r.Usage().UsedBytes[0]))
	a.Kill()
	time.Sleep(50 * time.Millisecond)
	procs, bytes := r.Reap(region.ProcessAlive)
	fmt.Printf("The node reaper finds it dead and reclaims %d slot, %s; team-a's region now holds %s.\n",
		procs, gb(bytes), gb(r.Usage().UsedBytes[0]))
	a2, err := d.start("team-a", envA, true)
	if err != nil {
		return err
	}
	for _, c := range []string{"init", "ctx 0"} {
		if _, err := a2.Must(c); err != nil {
			return err
		}
	}
	fmt.Println("A new team-a process starts and gets the whole cap back:")
	if err := alloc(a2, "n1", 12*gib); err != nil {
		return err
	}
	nv, _ = probe.Must("nvml 0")
	fmt.Printf("\nThe GPU now holds %s: team-b's 20 GiB and the new team-a process's 12 GiB.\n",
		gb(cudash.Value(nv, "used")))
	for _, p := range []*cudash.Shell{a2, b, probe} {
		if err := p.Exit(); err != nil {
			return err
		}
	}
	return nil
}

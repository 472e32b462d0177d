package allocation

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/tessera-gpu/tessera/internal/deviceplugin/resource"
	"github.com/tessera-gpu/tessera/internal/gpu"
	"github.com/tessera-gpu/tessera/internal/gpu/gputest"
	"github.com/tessera-gpu/tessera/internal/mig"
	"github.com/tessera-gpu/tessera/internal/region"
)

func builder(t testing.TB) (*Builder, []gpu.GPU) {
	t.Helper()
	node := gputest.MustNew(gputest.DGXA100)
	if _, err := node.EnableMIG(7, nvml.GPU_INSTANCE_PROFILE_1_SLICE); err != nil {
		t.Fatal(err)
	}
	gpus, err := gpu.Discover(node, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	m, _ := resource.NewManager(gpus, resource.Options{SplitCount: 10, MemoryUnit: 256 << 20, MIG: true})
	b := &Builder{Manager: m, HookLibrary: "/opt/tessera/libtessera-hook.so", StateDir: t.TempDir(), ContextReserveMiB: 300, HookLogLevel: "info",
		ProcRoot: t.TempDir()}
	if err := node.WriteMIGMinors(b.ProcRoot); err != nil {
		t.Fatal(err)
	}
	if err := b.Prepare(); err != nil {
		t.Fatal(err)
	}
	return b, gpus
}

func TestMemoryResponseSpansGPUsFromIDs(t *testing.T) {
	b, gpus := builder(t)
	a, c := gpus[3].UUID, gpus[1].UUID
	// kubelet handed IDs on two GPUs: the container sees both, each capped
	// at what its IDs say.
	ids := []string{a + "::mem::0", a + "::mem::1", a + "::mem::2", c + "::mem::9"}
	r, err := b.Container(resource.Memory, ids)
	if err != nil {
		t.Fatal(err)
	}
	if r.Envs[EnvNVIDIA] != c+","+a || r.Envs[EnvCUDAVisible] != c+","+a {
		t.Fatalf("visible = %q, want GPU 1 then GPU 3", r.Envs[EnvNVIDIA])
	}
	if r.Envs[EnvCtxReserve] != "300" || r.Envs[EnvLog] != "info" || r.Envs[EnvRegion] != RegionPath || r.Envs[EnvLimits] != LimitsPath {
		t.Fatalf("env = %v", r.Envs)
	}
	paths := map[string]string{}
	for _, d := range r.Devices {
		paths[d.ContainerPath] = d.HostPath
	}
	for _, p := range []string{"/dev/nvidia1", "/dev/nvidia3", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"} {
		if paths[p] != p {
			t.Errorf("device %s missing: %v", p, paths)
		}
	}
	dir := b.ContainerDir(resource.KindMem, ids)
	l, err := region.OpenLimits(filepath.Join(dir, "limits"))
	if err != nil {
		t.Fatal(err)
	}
	devs := l.Devices()
	l.Close()
	if len(devs) != 2 || devs[0].UUID != c || devs[0].MemLimitBytes != 256<<20 || devs[1].MemLimitBytes != 768<<20 {
		t.Fatalf("limits = %+v", devs)
	}
	preload, _ := os.ReadFile(filepath.Join(b.StateDir, "ld.so.preload"))
	if string(preload) != b.HookLibrary+"\n" {
		t.Fatalf("ld.so.preload = %q", preload)
	}
	// Same IDs in another order: same files (a restarted plugin finds them).
	rev := []string{ids[3], ids[2], ids[1], ids[0]}
	if b.ContainerDir(resource.KindMem, rev) != dir {
		t.Fatal("container key depends on ID order")
	}
	if b.ContainerDir(resource.KindCore, rev) == dir {
		t.Fatal("memory and core allocations share a key")
	}
}

func TestRegionSurvivesReallocation(t *testing.T) {
	b, gpus := builder(t)
	ids := []string{gpus[0].UUID + "::mem::4"}
	if _, err := b.Container(resource.Memory, ids); err != nil {
		t.Fatal(err)
	}
	regionPath := filepath.Join(b.ContainerDir(resource.KindMem, ids), "region")
	before, _ := os.Stat(regionPath)
	if err := b.Restore(resource.Memory, ids); err != nil {
		t.Fatal(err)
	}
	after, _ := os.Stat(regionPath)
	if !os.SameFile(before, after) {
		t.Fatal("restore replaced the region inode that hooks have mapped")
	}
	// The node agent lowered the cap in place: a restore keeps its value.
	limitsPath := filepath.Join(b.ContainerDir(resource.KindMem, ids), "limits")
	l, err := region.OpenLimits(limitsPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.SetMemLimit(gpus[0].UUID, 1<<20); err != nil {
		t.Fatal(err)
	}
	l.Close()
	if err := b.Restore(resource.Memory, ids); err != nil {
		t.Fatal(err)
	}
	if l, _ = region.OpenLimits(limitsPath); l.Devices()[0].MemLimitBytes != 1<<20 {
		t.Fatal("restore overwrote a limit the node agent set")
	}
	l.Close()
	// A wiped state directory comes back.
	os.RemoveAll(b.StateDir)
	if err := b.Restore(resource.Memory, ids); err != nil {
		t.Fatal(err)
	}
	if l, err = region.OpenLimits(limitsPath); err != nil || l.Devices()[0].MemLimitBytes != 256<<20 {
		t.Fatalf("restore after wipe: %v", err)
	}
	l.Close()
}

func TestCoreAndMIGResponses(t *testing.T) {
	b, gpus := builder(t)
	r, err := b.Container(resource.Core, []string{gpus[2].UUID + "::core::0", gpus[2].UUID + "::core::1"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Envs[EnvCoreLimits] != CoreLimitsPath || r.Envs[EnvRegion] != "" {
		t.Fatalf("core env = %v", r.Envs)
	}
	mig := gpus[7].MIG[0]
	res := resource.MIGResource(mig.Profile)
	r, err = b.Container(res, []string{gpus[7].UUID + "::mig::" + mig.UUID})
	if err != nil {
		t.Fatal(err)
	}
	if r.Envs[EnvNVIDIA] != mig.UUID || len(r.Mounts) != 0 {
		t.Fatalf("MIG response = %+v", r)
	}
	// gputest numbers the capabilities as the driver lists them: after
	// config (1) and monitor (2), 9 per GPU instance (its access, then
	// compute instances 0-7), 15 GPU instances per GPU minor.
	giCap := 3 + gpus[7].Minor*15*9 + mig.GI*9
	want := []string{"/dev/nvidia7", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
		fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d", giCap), fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d", giCap+1+mig.CI)}
	if got := devicePaths(r); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("MIG device nodes = %v, want %v", got, want)
	}
	if _, err := b.Container(resource.Memory, nil); err == nil {
		t.Fatal("empty ID list accepted")
	}
}

func devicePaths(r *pluginapi.ContainerAllocateResponse) []string {
	var out []string
	for _, d := range r.Devices {
		if d.HostPath != d.ContainerPath && !strings.HasPrefix(d.HostPath, "/host/dev/") {
			out = append(out, "mismatch:"+d.HostPath+"→"+d.ContainerPath)
			continue
		}
		out = append(out, d.ContainerPath)
	}
	return out
}

// TestMIGRefusesWithoutCapabilities: a MIG allocation without a readable,
// well-formed mig-minors file, or without the device's capabilities in it,
// is refused with the file (and line) named, never answered without the
// capability nodes.
func TestMIGRefusesWithoutCapabilities(t *testing.T) {
	b, gpus := builder(t)
	inst := gpus[7].MIG[0]
	res, ids := resource.MIGResource(inst.Profile), []string{gpus[7].UUID + "::mig::" + inst.UUID}
	file := filepath.Join(b.ProcRoot, "driver/nvidia-caps/mig-minors")
	for _, tc := range []struct{ content, want string }{
		{"", file + ": no such file"},
		{"config 1\nmonitor two\n", file + ":2:"},
		{"config 1\nmonitor 2\ngpu7/gi9/access 40\n", fmt.Sprintf("capability gpu7/gi%d/access not in", inst.GI)},
		{fmt.Sprintf("gpu7/gi%d/access 40\n", inst.GI), fmt.Sprintf("capability gpu7/gi%d/ci%d/access", inst.GI, inst.CI)},
	} {
		if err := os.Remove(file); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if tc.content != "" {
			if err := os.WriteFile(file, []byte(tc.content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		r, err := b.Container(res, ids)
		if err == nil || !strings.Contains(err.Error(), tc.want) || r != nil {
			t.Errorf("mig-minors %q: response %v, error %v; want an error containing %q", tc.content, r, err, tc.want)
		}
	}
	// Restore has nothing to write for MIG, so it does not need the file.
	if err := b.Restore(res, ids); err != nil {
		t.Fatalf("Restore of a MIG container: %v", err)
	}
}

// TestDevRootIsTheHostSide: device nodes keep /dev paths in the container
// and take their host side from DevRoot.
func TestDevRootIsTheHostSide(t *testing.T) {
	b, gpus := builder(t)
	b.DevRoot = "/host/dev"
	inst := gpus[7].MIG[0]
	r, err := b.Container(resource.MIGResource(inst.Profile), []string{gpus[7].UUID + "::mig::" + inst.UUID})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range r.Devices {
		if d.HostPath != "/host"+d.ContainerPath || !strings.HasPrefix(d.ContainerPath, "/dev/") || d.Permissions != "rw" {
			t.Fatalf("device %+v", d)
		}
	}
	if len(r.Devices) != 6 {
		t.Fatalf("%d devices", len(r.Devices))
	}
}

// TestMIGCapabilitiesFollowNVML: the capability nodes are those of the GPU
// and compute instance NVML reports at Allocate time (the driver reuses GI
// IDs after a reconfiguration), and a device NVML puts on another GPU than
// its ID names is refused.
func TestMIGCapabilitiesFollowNVML(t *testing.T) {
	b, gpus := builder(t)
	inst := gpus[7].MIG[0]
	res, ids := resource.MIGResource(inst.Profile), []string{gpus[7].UUID + "::mig::" + inst.UUID}
	b.LocateMIG = func(u string) (mig.Location, error) {
		return mig.Location{ParentMinor: gpus[7].Minor, GI: inst.GI + 4, CI: 2}, nil
	}
	r, err := b.Container(res, ids)
	if err != nil {
		t.Fatal(err)
	}
	giCap := 3 + gpus[7].Minor*15*9 + (inst.GI+4)*9
	if got := devicePaths(r); got[4] != fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d", giCap) || got[5] != fmt.Sprintf("/dev/nvidia-caps/nvidia-cap%d", giCap+3) {
		t.Fatalf("capability nodes %v, want GI %d CI 2 as NVML says", got, inst.GI+4)
	}
	b.LocateMIG = func(u string) (mig.Location, error) { return mig.Location{ParentMinor: 2, GI: inst.GI}, nil }
	if _, err := b.Container(res, ids); err == nil || !strings.Contains(err.Error(), "GPU minor 2") {
		t.Fatalf("MIG device on another GPU: %v", err)
	}
	b.LocateMIG = func(u string) (mig.Location, error) {
		return mig.Location{}, fmt.Errorf("MIG device %s: NVML handle: Not Found", u)
	}
	if _, err := b.Container(res, ids); err == nil || !strings.Contains(err.Error(), inst.UUID) {
		t.Fatalf("MIG device NVML does not know: %v", err)
	}
}

// TestFilesUsableByNonRootContainers: the hook maps the usage region
// read-write and the limits files read-only, as whatever user the
// container runs as (often not root, and never the plugin's root). The
// region must be writable and the limits readable by every user, whatever
// the plugin's umask, after Allocate and after Restore.
func TestFilesUsableByNonRootContainers(t *testing.T) {
	b, gpus := builder(t)
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	memIDs := []string{gpus[0].UUID + "::mem::1"}
	coreIDs := []string{gpus[0].UUID + "::core::1"}
	check := func(when string) {
		t.Helper()
		for path, want := range map[string]os.FileMode{
			filepath.Join(b.ContainerDir(resource.KindMem, memIDs), "region"):        0o666,
			filepath.Join(b.ContainerDir(resource.KindMem, memIDs), "limits"):        0o644,
			filepath.Join(b.ContainerDir(resource.KindCore, coreIDs), "core-limits"): 0o644,
			filepath.Join(b.ContainerDir(resource.KindCore, coreIDs), "core-region"): 0o666,
			filepath.Join(b.StateDir, "ld.so.preload"):                               0o644,
		} {
			st, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if st.Mode().Perm()&want != want {
				t.Errorf("%s: %s is %v, containers need %v", when, path, st.Mode().Perm(), want)
			}
		}
	}
	if err := b.Prepare(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Container(resource.Memory, memIDs); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Container(resource.Core, coreIDs); err != nil {
		t.Fatal(err)
	}
	check("Allocate")
	os.RemoveAll(filepath.Join(b.StateDir, "containers"))
	if err := b.Restore(resource.Memory, memIDs); err != nil {
		t.Fatal(err)
	}
	if err := b.Restore(resource.Core, coreIDs); err != nil {
		t.Fatal(err)
	}
	check("Restore")
}

// TestHalfWrittenFilesAreRecreated: a plugin killed while creating a
// container's files leaves them at full size with no magic (the magic is
// stored last). No hook can have mapped such a file, so the next Allocate
// of the same IDs, and a restore, must create it afresh instead of
// refusing those IDs until the state directory is collected.
func TestHalfWrittenFilesAreRecreated(t *testing.T) {
	b, gpus := builder(t)
	ids := []string{gpus[0].UUID + "::mem::2", gpus[0].UUID + "::mem::3"}
	dir := b.ContainerDir(resource.KindMem, ids)
	halfWrite := func() {
		t.Helper()
		if _, err := b.Container(resource.Memory, ids); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"limits", "region"} {
			f, err := os.OpenFile(filepath.Join(dir, name), os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt(make([]byte, 8), 0); err != nil { // the magic
				t.Fatal(err)
			}
			f.Close()
		}
	}
	valid := func(when string) {
		t.Helper()
		l, err := region.OpenLimits(filepath.Join(dir, "limits"))
		if err != nil {
			t.Fatalf("%s: limits: %v", when, err)
		}
		if d := l.Devices(); len(d) != 1 || d[0].UUID != gpus[0].UUID || d[0].MemLimitBytes != 512<<20 {
			t.Errorf("%s: limits = %+v", when, d)
		}
		l.Close()
		r, err := region.OpenRegion(filepath.Join(dir, "region"))
		if err != nil {
			t.Fatalf("%s: region: %v", when, err)
		}
		r.Close()
	}
	halfWrite()
	if _, err := b.Container(resource.Memory, ids); err != nil {
		t.Fatalf("Allocate after a half-written file: %v", err)
	}
	valid("Allocate")
	halfWrite()
	if err := b.Restore(resource.Memory, ids); err != nil {
		t.Fatalf("Restore of a half-written file: %v", err)
	}
	valid("Restore")
}

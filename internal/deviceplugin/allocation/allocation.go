// Package allocation turns the device IDs kubelet hands to Allocate into a
// container's runtime setup for the CUDA hook: visible GPUs, device nodes,
// the hook library and its ld.so.preload file, the per-container usage
// region and limits files, and the TESSERA_* environment. Everything is
// derived from the IDs; nothing is guessed.
package allocation

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/tessera-gpu/tessera/internal/deviceplugin/resource"
	"github.com/tessera-gpu/tessera/internal/mig"
	"github.com/tessera-gpu/tessera/internal/region"
)

// Paths inside the container and environment variables the hook reads.
const (
	RegionPath     = "/run/tessera/region"
	LimitsPath     = "/run/tessera/limits"
	CoreLimitsPath = "/run/tessera/core-limits"
	CoreRegionPath = "/run/tessera/core-region"
	PreloadPath    = "/etc/ld.so.preload"

	EnvRegion      = "TESSERA_REGION"
	EnvLimits      = "TESSERA_LIMITS"
	EnvCoreLimits  = "TESSERA_CORE_LIMITS"
	EnvCoreRegion  = "TESSERA_CORE_REGION"
	EnvCtxReserve  = "TESSERA_CTX_RESERVE_MIB"
	EnvLog         = "TESSERA_LOG"
	EnvNVIDIA      = "NVIDIA_VISIBLE_DEVICES"
	EnvCUDAVisible = "CUDA_VISIBLE_DEVICES"
)

// Modes of the files containers map. A container's processes run as any
// user (often not root), so the mode must not depend on the plugin's
// umask: the hook maps the usage region read-write and the limits files
// and ld.so.preload read-only. Each region is mounted into its own
// container only.
const (
	readableByAll os.FileMode = 0o644
	writableByAll os.FileMode = 0o666
)

// Control device nodes every GPU container needs.
var controlDevices = []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"}

// Builder builds Allocate responses.
type Builder struct {
	Manager           *resource.Manager
	HookLibrary       string
	StateDir          string
	ContextReserveMiB int
	HookLogLevel      string
	// AllowGPUSpill accepts gpu-mem and gpu-core IDs on more GPUs than the
	// container requested (config allowGPUSpill); see CheckSpan.
	AllowGPUSpill bool
	// ProcRoot is where the host's /proc is seen (default /proc): MIG
	// capability minors are read from its driver/nvidia-caps/mig-minors.
	ProcRoot string
	// DevRoot is the host side of device nodes as kubelet sees them
	// (default /dev); containers always see them under /dev.
	DevRoot string
	// DeviceList is the config's deviceListStrategy: envvar (or empty)
	// hands over device nodes and NVIDIA_VISIBLE_DEVICES; cdi-annotations
	// and cdi-cri name CDI devices of CDIKind instead (see cdi.go).
	DeviceList string
	// CDIKind is the vendor/class of the CDI spec (config cdiKind).
	CDIKind string
	// LocateMIG reports where a MIG device is now (mig.Locate over NVML).
	// Nil uses what discovery saw.
	LocateMIG func(migUUID string) (mig.Location, error)

	// dirs is held for reading while a container directory is created or
	// refreshed; the state directory collection holds it for writing
	// (DirLock), so it never removes a directory an Allocate is filling.
	dirs sync.RWMutex
}

// DirLock is the lock the state directory collection (statedir.Collector's
// Writers) must share with this builder.
func (b *Builder) DirLock() *sync.RWMutex { return &b.dirs }

// Prepare creates the state directory and the ld.so.preload file that every
// tessera container mounts.
func (b *Builder) Prepare() error {
	if err := os.MkdirAll(filepath.Join(b.StateDir, "containers"), 0o755); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	if err := b.writeHookConf(); err != nil {
		return err
	}
	if err := ensureFile(b.preloadHostPath(), []byte(b.HookLibrary+"\n")); err != nil {
		return fmt.Errorf("ld.so.preload: %w", err)
	}
	return nil
}

func (b *Builder) preloadHostPath() string { return filepath.Join(b.StateDir, "ld.so.preload") }

// ContainerDir is where a container allocation's files live on the host.
// The key is a hash of the sorted IDs, so a restarted plugin finds it again.
func (b *Builder) ContainerDir(kind resource.Kind, ids []string) string {
	return filepath.Join(b.StateDir, "containers", Key(kind, ids))
}

// Key names a container allocation by kind and device IDs.
func Key(kind resource.Kind, ids []string) string {
	sorted := append([]string(nil), ids...)
	sort.Strings(sorted)
	sum := sha256.Sum256([]byte(strings.Join(sorted, "\n")))
	return string(kind) + "-" + hex.EncodeToString(sum[:8])
}

// Container builds the response for one container's IDs of one resource,
// for a container whose pod is not known (Unattributed).
func (b *Builder) Container(res string, ids []string) (*pluginapi.ContainerAllocateResponse, error) {
	return b.ContainerFor(res, ids, Unattributed)
}

// ContainerFor builds the response with the pod's compute scheduling (used by
// gpu-core allocations only).
func (b *Builder) ContainerFor(res string, ids []string, sched Scheduling) (*pluginapi.ContainerAllocateResponse, error) {
	kind, ok := resource.KindOf(res)
	if !ok {
		return nil, fmt.Errorf("unknown resource %q", res)
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("%s: no device IDs", res)
	}
	shares, err := b.Manager.Shares(res, ids)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", res, err)
	}
	if err := b.Manager.Retired(res, ids); err != nil {
		return nil, fmt.Errorf("%s: %w", res, err)
	}
	for _, s := range shares {
		if !b.Manager.Healthy(s.GPU) {
			return nil, fmt.Errorf("%s: GPU %s is unhealthy", res, s.GPU)
		}
	}
	return b.build(res, kind, ids, shares, false, sched)
}

// Restore recreates a running container's files from its IDs when they are
// missing or invalid, whatever the GPUs' health. Valid files are left alone:
// the node agent may have changed the limits in place since Allocate.
func (b *Builder) Restore(res string, ids []string) error {
	kind, ok := resource.KindOf(res)
	if !ok {
		return fmt.Errorf("unknown resource %q", res)
	}
	shares, err := b.Manager.Shares(res, ids)
	if err != nil {
		return fmt.Errorf("%s: %w", res, err)
	}
	_, err = b.build(res, kind, ids, shares, true, Unattributed)
	return err
}

// build makes the response and writes the files; keep leaves valid
// existing limits files untouched.
func (b *Builder) build(res string, kind resource.Kind, ids []string, shares []resource.Share, keep bool, sched Scheduling) (*pluginapi.ContainerAllocateResponse, error) {
	var err error
	if kind == resource.KindMIG {
		if keep {
			// A MIG container has no files to restore.
			return nil, nil
		}
		r, err := b.mig(shares)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", res, err)
		}
		return r, nil
	}
	r, err := b.common(shares)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", res, err)
	}
	b.dirs.RLock()
	defer b.dirs.RUnlock()
	switch kind {
	case resource.KindMem:
		err = b.addMemory(r, ids, shares, keep)
	case resource.KindCore:
		err = b.addCore(r, ids, shares, keep, sched)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", res, err)
	}
	return r, nil
}

// common is what every tessera response of a container carries, identical
// across its resources so kubelet merges them without conflict.
func (b *Builder) common(shares []resource.Share) (*pluginapi.ContainerAllocateResponse, error) {
	uuids := make([]string, 0, len(shares))
	for _, s := range shares {
		uuids = append(uuids, s.GPU)
	}
	env := map[string]string{EnvLog: b.HookLogLevel}
	if b.ContextReserveMiB > 0 {
		env[EnvCtxReserve] = strconv.Itoa(b.ContextReserveMiB)
	}
	r := &pluginapi.ContainerAllocateResponse{
		Envs: env,
		Mounts: []*pluginapi.Mount{
			{HostPath: b.HookLibrary, ContainerPath: b.HookLibrary, ReadOnly: true},
			{HostPath: b.preloadHostPath(), ContainerPath: PreloadPath, ReadOnly: true},
			{HostPath: b.hookConfHostPath(), ContainerPath: HookConfPath, ReadOnly: true},
		},
	}
	if b.usesCDI() {
		return r, b.addCDIDevices(r, uuids)
	}
	visible := strings.Join(uuids, ",")
	r.Envs[EnvNVIDIA], r.Envs[EnvCUDAVisible] = visible, visible
	r.Devices = b.deviceSpecs(shares)
	return r, nil
}

// writeLimits writes one limits file per container allocation, in place
// (or, with keep, only when no valid file is there).
func (b *Builder) writeLimits(kind resource.Kind, ids []string, name string, keep bool, shares []resource.Share, limit func(resource.Share) region.DeviceLimit) (string, error) {
	dir := b.ContainerDir(kind, ids)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	// The same IDs name the same directory, which an earlier container may
	// have left unreferenced for long; a fresh mtime keeps the reconciler's
	// collection (which spares young directories) off it while kubelet's
	// PodResources does not list the new container yet.
	now := time.Now()
	if err := os.Chtimes(dir, now, now); err != nil {
		return "", err
	}
	path := filepath.Join(dir, name)
	if keep {
		if l, err := region.OpenLimits(path); err == nil {
			l.Close()
			return dir, os.Chmod(path, readableByAll)
		}
	}
	limits := make([]region.DeviceLimit, 0, len(shares))
	for _, s := range shares {
		limits = append(limits, limit(s))
	}
	if err := recreateIfInvalid(path, func() error { return region.WriteLimits(path, limits) }); err != nil {
		return "", err
	}
	return dir, os.Chmod(path, readableByAll)
}

func (b *Builder) addMemory(r *pluginapi.ContainerAllocateResponse, ids []string, shares []resource.Share, keep bool) error {
	dir, err := b.writeLimits(resource.KindMem, ids, "limits", keep, shares, func(s resource.Share) region.DeviceLimit {
		return region.DeviceLimit{UUID: s.GPU, MemLimitBytes: s.MemBytes}
	})
	if err != nil {
		return err
	}
	regionPath := filepath.Join(dir, "region")
	if err := recreateIfInvalid(regionPath, func() error { return region.CreateRegion(regionPath) }); err != nil {
		return err
	}
	// Changing the mode keeps the inode that running hooks have mapped.
	if err := os.Chmod(regionPath, writableByAll); err != nil {
		return err
	}
	r.Mounts = append(r.Mounts,
		&pluginapi.Mount{HostPath: filepath.Join(dir, "region"), ContainerPath: RegionPath},
		&pluginapi.Mount{HostPath: filepath.Join(dir, "limits"), ContainerPath: LimitsPath, ReadOnly: true})
	r.Envs[EnvRegion] = RegionPath
	r.Envs[EnvLimits] = LimitsPath
	return nil
}

func (b *Builder) addCore(r *pluginapi.ContainerAllocateResponse, ids []string, shares []resource.Share, keep bool, sched Scheduling) error {
	dir, err := b.writeLimits(resource.KindCore, ids, "core-limits", keep, shares, func(s resource.Share) region.DeviceLimit {
		return region.DeviceLimit{UUID: s.GPU, CoreLimitPct: uint32(s.CorePct), Policy: sched.Policy, Priority: sched.Priority}
	})
	if err != nil {
		return err
	}
	// The core region: where the container's hooks publish the GPU time
	// they measured, for the node agent's arbiter (docs/hook.md).
	regionPath := filepath.Join(dir, "core-region")
	if err := recreateIfInvalid(regionPath, func() error { return region.CreateRegion(regionPath) }); err != nil {
		return err
	}
	if err := os.Chmod(regionPath, writableByAll); err != nil {
		return err
	}
	r.Mounts = append(r.Mounts,
		&pluginapi.Mount{HostPath: filepath.Join(dir, "core-limits"), ContainerPath: CoreLimitsPath, ReadOnly: true},
		&pluginapi.Mount{HostPath: regionPath, ContainerPath: CoreRegionPath})
	r.Envs[EnvCoreLimits] = CoreLimitsPath
	r.Envs[EnvCoreRegion] = CoreRegionPath
	return nil
}

// mig exposes whole MIG devices; the hook is not injected because MIG
// isolates memory and compute in hardware. Besides the parent GPU's node,
// a process needs the access capability nodes of the MIG device's GPU
// instance and compute instance (/dev/nvidia-caps/nvidia-cap<N>), which
// the NVIDIA container runtime would otherwise add. Without them CUDA
// sees no device, so a missing or unreadable minors file refuses the
// allocation instead of starting a container that cannot use its GPU.
func (b *Builder) mig(shares []resource.Share) (*pluginapi.ContainerAllocateResponse, error) {
	if b.usesCDI() {
		// The CDI spec's MIG device (named by its UUID) carries the parent
		// GPU's node and both capability nodes.
		var migs []string
		for _, s := range shares {
			migs = append(migs, s.MIG...)
		}
		r := &pluginapi.ContainerAllocateResponse{Envs: map[string]string{}}
		return r, b.addCDIDevices(r, migs)
	}
	minors, err := mig.ReadMinors(b.procRoot())
	if err != nil {
		return nil, err
	}
	var migs []string
	var caps []string
	for _, s := range shares {
		for _, u := range s.MIG {
			loc, err := b.locateMIG(s.GPU, u)
			if err != nil {
				return nil, err
			}
			nums, err := minors.AccessMinors(loc)
			if err != nil {
				return nil, fmt.Errorf("MIG device %s: %w", u, err)
			}
			for _, n := range nums {
				caps = append(caps, mig.CapDevicePath("/dev", n))
			}
			migs = append(migs, u)
		}
	}
	visible := strings.Join(migs, ",")
	devs := append(b.deviceSpecs(shares), b.specs(caps)...)
	return &pluginapi.ContainerAllocateResponse{Envs: map[string]string{EnvNVIDIA: visible, EnvCUDAVisible: visible}, Devices: devs}, nil
}

// deviceSpecs are the device nodes of the shares' GPUs plus the control nodes.
func (b *Builder) deviceSpecs(shares []resource.Share) []*pluginapi.DeviceSpec {
	paths := make([]string, 0, len(shares)+len(controlDevices))
	for _, s := range shares {
		paths = append(paths, b.Manager.GPU(s.GPU).DevicePath())
	}
	return b.specs(append(paths, controlDevices...))
}

// specs maps container device paths (under /dev) to rw device specs whose
// host side is under DevRoot.
func (b *Builder) specs(paths []string) []*pluginapi.DeviceSpec {
	devs := make([]*pluginapi.DeviceSpec, 0, len(paths))
	for _, p := range paths {
		host := p
		if rel, ok := strings.CutPrefix(p, "/dev/"); ok && b.DevRoot != "" {
			host = filepath.Join(b.DevRoot, rel)
		}
		devs = append(devs, &pluginapi.DeviceSpec{HostPath: host, ContainerPath: p, Permissions: "rw"})
	}
	return devs
}

// locateMIG finds MIG device u of GPU parent and checks that it is still
// on that GPU.
func (b *Builder) locateMIG(parent, u string) (mig.Location, error) {
	g := b.Manager.GPU(parent)
	inst, ok := g.MIGDevice(u)
	if !ok {
		return mig.Location{}, fmt.Errorf("MIG device %s is no longer on GPU %s", u, parent)
	}
	if b.LocateMIG == nil {
		return mig.Location{ParentMinor: g.Minor, GI: inst.GI, CI: inst.CI}, nil
	}
	loc, err := b.LocateMIG(u)
	if err != nil {
		return mig.Location{}, err
	}
	if loc.ParentMinor != g.Minor {
		return mig.Location{}, fmt.Errorf("MIG device %s: NVML puts it on GPU minor %d, not on %s (minor %d)", u, loc.ParentMinor, parent, g.Minor)
	}
	return loc, nil
}

func (b *Builder) procRoot() string {
	if b.ProcRoot == "" {
		return "/proc"
	}
	return b.ProcRoot
}

// recreateIfInvalid runs create, which keeps or updates a valid existing
// file in place; if the file is there but has no magic or is short (the
// plugin was killed while creating it: the magic is stored last), it is
// removed and created afresh. No hook can have mapped such a file (hooks
// check the header), so no inode in use is replaced.
func recreateIfInvalid(path string, create func() error) error {
	err := create()
	if !errors.Is(err, region.ErrBadMagic) && !errors.Is(err, region.ErrTruncated) {
		return err
	}
	if rmErr := os.Remove(path); rmErr != nil {
		return fmt.Errorf("%w (and removing it: %v)", err, rmErr)
	}
	return create()
}

// ensureFile makes path a regular file holding data, readable by all, and
// writes it only when its content differs. Every running container has
// the file's inode bind-mounted: kept, it stays the file they see (a wrong
// mode is fixed in place). New content goes to a new inode renamed over
// the old one, so containers started earlier keep the content that names
// the hook path mounted into them, and only new containers get the new
// one. An empty directory at path (a runtime creates one for a missing
// bind-mount source) is replaced; anything else in a directory there is
// reported, not deleted.
func ensureFile(path string, data []byte) error {
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return err
	case fi.Mode().IsRegular():
		if have, err := os.ReadFile(path); err == nil && bytes.Equal(have, data) {
			if fi.Mode().Perm() == readableByAll {
				return nil
			}
			return os.Chmod(path, readableByAll)
		}
	case fi.IsDir():
		if err := os.Remove(path); err != nil {
			return fmt.Errorf("%s is a directory, not the file to mount: %w", path, err)
		}
	}
	return writeFileAtomic(path, data)
}

// syncFile flushes a file or directory to disk; a variable so that a test
// can make it fail.
var syncFile = (*os.File).Sync

// writeFileAtomic replaces path with data: written and flushed to a
// temporary file, renamed over path, then the directory flushed. A crash or
// power loss leaves the old content or the new one, never an empty or
// partial file, which containers restarted before the plugin would mount
// (an empty ld.so.preload loads no hook). On error path is left as it was.
func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, readableByAll)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = syncFile(f)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp, readableByAll)
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	dir, err := os.Open(filepath.Dir(path))
	if err != nil {
		return fmt.Errorf("flush the directory of %s: %w", path, err)
	}
	defer dir.Close()
	if err := syncFile(dir); err != nil {
		return fmt.Errorf("flush the directory of %s: %w", path, err)
	}
	return nil
}

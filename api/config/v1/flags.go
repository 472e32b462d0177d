package v1

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
)

// Flags binds command-line flags that override config fields. Only flags the
// user set explicitly override the file; unset flags keep file values.
type Flags struct {
	fs   *flag.FlagSet
	Path string
	vals map[string]*string
}

// flagFields maps a flag name to the config field it sets.
var flagFields = map[string]struct {
	usage string
	set   func(c *Config, v string) error
}{
	"node-name":            {"node name (config nodeName)", func(c *Config, v string) error { c.NodeName = v; return nil }},
	"split-count":          {"gpu slots per GPU (config splitCount)", func(c *Config, v string) error { return setInt(&c.SplitCount, v) }},
	"memory-unit":          {"gpu-mem unit, e.g. 1Gi (config memoryUnit)", func(c *Config, v string) error { return setQuantity(&c.MemoryUnit, v) }},
	"reserved-memory":      {"memory kept back per GPU (config reservedMemory)", func(c *Config, v string) error { return setQuantity(&c.ReservedMemory, v) }},
	"placement":            {"binpack or spread (config placement)", func(c *Config, v string) error { c.Placement = v; return nil }},
	"allow-gpu-spill":      {"true lets a container's gpu-mem/gpu-core span more GPUs than it requested (config allowGPUSpill)", func(c *Config, v string) error { return setBool(&c.AllowGPUSpill, v) }},
	"mig-strategy":         {"none or mixed (config migStrategy)", func(c *Config, v string) error { c.MIGStrategy = v; return nil }},
	"device-list-strategy": {"envvar, cdi-annotations or cdi-cri (config deviceListStrategy)", func(c *Config, v string) error { c.DeviceListStrategy = v; return nil }},
	"cdi-kind":             {"CDI kind of the GPU devices, e.g. nvidia.com/gpu (config cdiKind)", func(c *Config, v string) error { c.CDIKind = v; return nil }},
	"hook-library":         {"host path of the CUDA hook (config hookLibrary)", func(c *Config, v string) error { c.HookLibrary = v; return nil }},
	"state-dir":            {"state directory (config stateDir)", func(c *Config, v string) error { c.StateDir = v; return nil }},
	"kubelet-socket-dir":   {"kubelet device-plugin dir (config kubeletSocketDir)", func(c *Config, v string) error { c.KubeletSocketDir = v; return nil }},
	"pod-resources-socket": {"PodResources socket (config podResourcesSocket)", func(c *Config, v string) error { c.PodResourcesSocket = v; return nil }},
	"metrics-address":      {"metrics listen address (config metricsAddress)", func(c *Config, v string) error { c.MetricsAddress = v; return nil }},
	"reconcile-interval":   {"PodResources read-back period (config reconcileInterval)", func(c *Config, v string) error { return setDuration(&c.ReconcileInterval, v) }},
	"rediscover-interval":  {"MIG layout re-read period, 0 disables (config rediscoverInterval)", func(c *Config, v string) error { return setDuration(&c.RediscoverInterval, v) }},
	"proc-root":            {"host /proc as the plugin sees it (config procRoot)", func(c *Config, v string) error { c.ProcRoot = v; return nil }},
	"dev-root":             {"host /dev as kubelet sees it (config devRoot)", func(c *Config, v string) error { c.DevRoot = v; return nil }},
	"log-level":            {"debug, info, warn or error (config log.level)", func(c *Config, v string) error { c.Log.Level = v; return nil }},
	"log-format":           {"json or text (config log.format)", func(c *Config, v string) error { c.Log.Format = v; return nil }},
	"health-ignored-xids":  {"comma-separated Xids to ignore (config health.ignoredXids)", setXids},
}

// BindFlags registers the override flags and --config on fs.
func BindFlags(fs *flag.FlagSet) *Flags {
	f := &Flags{fs: fs, vals: map[string]*string{}}
	fs.StringVar(&f.Path, "config", "", "path of the v1 YAML config file")
	for name, ff := range flagFields {
		f.vals[name] = fs.String(name, "", ff.usage)
	}
	return f
}

// Resolve loads the file, applies explicitly set flags, and validates.
func (f *Flags) Resolve() (*Config, error) {
	c, err := Load(f.Path)
	if err != nil {
		return nil, err
	}
	var errs []error
	f.fs.Visit(func(fl *flag.Flag) {
		ff, ok := flagFields[fl.Name]
		if !ok {
			return
		}
		if err := ff.set(c, *f.vals[fl.Name]); err != nil {
			errs = append(errs, fmt.Errorf("--%s: %w", fl.Name, err))
		}
	})
	if len(errs) > 0 {
		return nil, errs[0]
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("invalid config: %w", err)
	}
	return c, nil
}

func setInt(dst *int, v string) error {
	n, err := strconv.Atoi(v)
	if err != nil {
		return fmt.Errorf("not an integer: %q", v)
	}
	*dst = n
	return nil
}

func setBool(dst *bool, v string) error {
	b, err := strconv.ParseBool(v)
	if err != nil {
		return fmt.Errorf("not true or false: %q", v)
	}
	*dst = b
	return nil
}

func setQuantity(dst *resource.Quantity, v string) error {
	q, err := resource.ParseQuantity(v)
	if err != nil {
		return fmt.Errorf("not a quantity: %q", v)
	}
	*dst = q
	return nil
}

func setDuration(dst *Duration, v string) error {
	d, err := time.ParseDuration(v)
	if err != nil {
		return fmt.Errorf("not a duration: %q", v)
	}
	dst.Duration = d
	return nil
}

func setXids(c *Config, v string) error {
	c.Health.IgnoredXids = nil
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		x, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return fmt.Errorf("not an Xid: %q", s)
		}
		c.Health.IgnoredXids = append(c.Health.IgnoredXids, x)
	}
	return nil
}

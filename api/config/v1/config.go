// Package v1 is the device plugin's typed, versioned configuration file
// (`version: v1`). Values are resolved in three steps: defaults, then the
// YAML file, then command-line flags that were explicitly set. Validate
// rejects every invalid value with the name of its field.
package v1

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"
	"tags.cncf.io/container-device-interface/pkg/parser"
)

// Version is the config schema version this package reads.
const Version = "v1"

// Placement policies for requests that carry no scheduler assignment.
const (
	PlacementBinpack = "binpack"
	PlacementSpread  = "spread"
)

// MIG strategies. NVIDIA's "single" strategy (MIG devices of one profile
// advertised under the whole-GPU resource) is rejected: tessera.io/gpu is a
// time-shared slot of a GPU that comes with gpu-mem and gpu-core units
// enforced by the CUDA hook, so the same name cannot also mean one
// hardware-isolated MIG slice (see docs/device-plugin.md).
const (
	MIGStrategyNone   = "none"
	MIGStrategyMixed  = "mixed"
	MIGStrategySingle = "single"
)

// Device list strategies: how Allocate tells the container runtime which
// GPUs a container gets.
const (
	// DeviceListEnvVar hands over the GPUs' device nodes and
	// NVIDIA_VISIBLE_DEVICES (no CDI needed; an NVIDIA runtime honours the
	// variable as well).
	DeviceListEnvVar = "envvar"
	// DeviceListCDIAnnotations names CDI devices in a cdi.k8s.io/ annotation
	// of the response, which a CDI-enabled runtime (containerd >= 1.7,
	// CRI-O >= 1.23) resolves against the spec of CDIKind.
	DeviceListCDIAnnotations = "cdi-annotations"
	// DeviceListCDICRI names CDI devices in ContainerAllocateResponse's
	// CDIDevices, which kubelet passes to the runtime in the CRI's
	// CDIDevices field (kubelet >= 1.29, DevicePluginCDIDevices).
	DeviceListCDICRI = "cdi-cri"
)

// DefaultCDIKind is the kind of the NVIDIA Container Toolkit's spec
// (nvidia-ctk cdi generate), whose devices are named by GPU or MIG UUID
// (and "all").
const DefaultCDIKind = "nvidia.com/gpu"

// Config is the whole device plugin configuration.
type Config struct {
	Version string `json:"version"`
	// NodeName is this node's name; defaults to $NODE_NAME.
	NodeName string `json:"nodeName,omitempty"`
	// SplitCount is the number of tessera.io/gpu slots per GPU: the most
	// containers one GPU may hold.
	SplitCount int `json:"splitCount"`
	// MemoryUnit is the size of one tessera.io/gpu-mem unit (>= 128Mi, a
	// multiple of 1Mi).
	MemoryUnit resource.Quantity `json:"memoryUnit"`
	// ReservedMemory is kept back on each GPU (driver, monitoring) and not advertised.
	ReservedMemory resource.Quantity `json:"reservedMemory"`
	// Placement decides where requests without an assignment go.
	Placement string `json:"placement"`
	// AllowGPUSpill lets a container whose tessera.io/gpu-mem or
	// tessera.io/gpu-core request no single GPU can hold receive units of
	// several GPUs (more GPUs than its tessera.io/gpu: N, or more than one
	// without it). Off by default: a program written for one GPU would see
	// two, with its memory cap split between them, so Allocate refuses the
	// request instead (kubelet reports the refusal as the pod's admission
	// error).
	AllowGPUSpill bool   `json:"allowGPUSpill"`
	MIGStrategy   string `json:"migStrategy"`
	// DeviceListStrategy is how a container's GPUs reach the runtime:
	// envvar (device nodes + NVIDIA_VISIBLE_DEVICES), cdi-annotations or
	// cdi-cri (CDI device names of CDIKind, one per GPU or MIG UUID).
	DeviceListStrategy string `json:"deviceListStrategy"`
	// CDIKind is the vendor/class of the CDI spec the CDI strategies name
	// devices in: the NVIDIA Container Toolkit's by default; any spec with
	// one device per GPU UUID works (the simulated driver's in tests).
	CDIKind string `json:"cdiKind"`
	// RediscoverInterval is how often the GPUs' MIG layout is read again;
	// a change is advertised without a restart. 0 disables it.
	RediscoverInterval Duration `json:"rediscoverInterval"`
	// ProcRoot is where the host's /proc is seen (the driver's
	// nvidia-caps/mig-minors file is read under it).
	ProcRoot string `json:"procRoot"`
	// DevRoot is the host's device directory as kubelet sees it: the host
	// side of the device nodes handed to containers (in containers they are
	// always under /dev).
	DevRoot string `json:"devRoot"`
	// HookLibrary is the host path of libtessera-hook.so; it is mounted at the
	// same path in containers.
	HookLibrary string `json:"hookLibrary"`
	// StateDir holds per-container region and limits files and the ld.so.preload file.
	StateDir string `json:"stateDir"`
	// KubeletSocketDir is kubelet's device-plugin directory.
	KubeletSocketDir string `json:"kubeletSocketDir"`
	// PodResourcesSocket is kubelet's PodResources API socket.
	PodResourcesSocket string `json:"podResourcesSocket"`
	// ContextReserveMiB is charged against the cap per CUDA context by the hook.
	ContextReserveMiB int `json:"contextReserveMiB"`
	// HookLogLevel is passed to the hook as TESSERA_LOG.
	HookLogLevel string `json:"hookLogLevel"`
	// ReconcileInterval is how often PodResources is read back.
	ReconcileInterval Duration `json:"reconcileInterval"`
	// MetricsAddress serves /metrics and /healthz; empty disables it.
	MetricsAddress string       `json:"metricsAddress"`
	Health         HealthConfig `json:"health"`
	Log            LogConfig    `json:"log"`
	// ComputePriority maps pods to the compute priority their gpu-core
	// allocations get (docs/device-plugin.md "Compute policy and priority").
	ComputePriority ComputePriorityConfig `json:"computePriority"`
}

// ComputePriorityConfig is the table from a pod to its priority class P0..P3:
// the tessera.io/priority annotation (the class names P0..P3 and the aliases
// listed here), else the pod's PriorityClass value against ClassValues. All
// empty: the default table (aliases realtime, online, training, batch,
// evaluation; values ≥ 1,000,000 P0, ≥ 100,000 P1, ≥ 1,000 P2, else P3).
type ComputePriorityConfig struct {
	Annotation   map[string]string `json:"annotation,omitempty"`
	ClassValues  []ClassValue      `json:"classValues,omitempty"`
	DefaultClass string            `json:"defaultClass,omitempty"`
}

// ClassValue maps PriorityClass values of at least AtLeast to Class.
type ClassValue struct {
	AtLeast int32  `json:"atLeast"`
	Class   string `json:"class"`
}

// check reports malformed class names (the table's own rules, such as an
// inverted ClassValues order, are checked when the plugin builds it).
func (c ComputePriorityConfig) check(bad func(field, format string, args ...any)) {
	valid := func(s string) bool {
		t := strings.TrimSpace(s)
		return len(t) == 2 && (t[0] == 'P' || t[0] == 'p') && t[1] >= '0' && t[1] <= '3'
	}
	for alias, v := range c.Annotation {
		if !valid(v) {
			bad("computePriority.annotation["+alias+"]", "%q is not P0..P3", v)
		}
	}
	for i, row := range c.ClassValues {
		if !valid(row.Class) {
			bad(fmt.Sprintf("computePriority.classValues[%d].class", i), "%q is not P0..P3", row.Class)
		}
	}
	if c.DefaultClass != "" && !valid(c.DefaultClass) {
		bad("computePriority.defaultClass", "%q is not P0..P3", c.DefaultClass)
	}
}

// HealthConfig controls NVML-event health checking.
type HealthConfig struct {
	Enabled bool `json:"enabled"`
	// IgnoredXids are application-caused Xids that do not make a GPU unhealthy.
	IgnoredXids []uint64 `json:"ignoredXids"`
	// RecoverAfter marks a GPU healthy again after this long without a
	// critical event; 0 keeps it unhealthy until the plugin restarts.
	RecoverAfter Duration `json:"recoverAfter"`
}

// LogConfig controls a component's own structured logs.
type LogConfig struct {
	Level  string `json:"level"`
	Format string `json:"format"`
}

// Logger returns the logger l describes, writing to stderr and tagging every
// record with component. Validate has checked Level and Format; an unknown
// level logs at info, an unknown format as JSON.
func (l LogConfig) Logger(component string) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(l.Level))
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler = slog.NewJSONHandler(os.Stderr, opts)
	if l.Format == "text" {
		h = slog.NewTextHandler(os.Stderr, opts)
	}
	return slog.New(h).With("component", component)
}

// Duration is a time.Duration written as a Go duration string ("30s").
type Duration struct{ time.Duration }

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) { return []byte(`"` + d.String() + `"`), nil }

// UnmarshalJSON reads a duration string. A bad value is reported as a
// type error, to which the JSON decoder adds the field's name.
func (d *Duration) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(b), `"`)
	v, err := time.ParseDuration(s)
	if err != nil {
		return &json.UnmarshalTypeError{Value: fmt.Sprintf("invalid duration %s (want e.g. \"30s\")", b), Type: reflect.TypeFor[time.Duration]()}
	}
	d.Duration = v
	return nil
}

// DefaultIgnoredXids are Xids usually caused by applications, not hardware.
var DefaultIgnoredXids = []uint64{13, 31, 43, 45, 68, 109}

// Default returns the configuration used when nothing is set.
func Default() *Config {
	return &Config{
		Version:            Version,
		NodeName:           os.Getenv("NODE_NAME"),
		SplitCount:         10,
		MemoryUnit:         resource.MustParse("1Gi"),
		ReservedMemory:     resource.MustParse("0"),
		Placement:          PlacementBinpack,
		AllowGPUSpill:      false,
		MIGStrategy:        MIGStrategyMixed,
		DeviceListStrategy: DeviceListEnvVar,
		CDIKind:            DefaultCDIKind,
		RediscoverInterval: Duration{time.Minute},
		ProcRoot:           "/proc",
		DevRoot:            "/dev",
		HookLibrary:        "/usr/local/tessera/lib/libtessera-hook.so",
		StateDir:           "/var/lib/tessera",
		KubeletSocketDir:   "/var/lib/kubelet/device-plugins",
		PodResourcesSocket: "/var/lib/kubelet/pod-resources/kubelet.sock",
		HookLogLevel:       "warn",
		ReconcileInterval:  Duration{30 * time.Second},
		MetricsAddress:     ":9400",
		Health:             HealthConfig{Enabled: true, IgnoredXids: append([]uint64(nil), DefaultIgnoredXids...)},
		Log:                LogConfig{Level: "info", Format: "json"},
	}
}

// Load reads path over the defaults. An empty path returns the defaults.
// Unknown fields are errors: a typo must not silently fall back to a default.
func Load(path string) (*Config, error) {
	return loadOver(path, Default(), Parse)
}

// Parse decodes YAML into c, keeping c's values for absent fields.
func Parse(data []byte, c *Config) error {
	return decodeVersioned(data, c, checkQuantities)
}

// loadOver parses the file at path over c, the defaults; an empty path
// returns c unchanged. Errors name the file.
func loadOver[T any](path string, c T, parse func([]byte, T) error) (T, error) {
	var none T
	if path == "" {
		return c, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return none, fmt.Errorf("config: %w", err)
	}
	if err := parse(data, c); err != nil {
		return none, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// decodeVersioned checks the document's version, then runs checks (which
// name fields the strict decoder's errors would not), then decodes data into
// c strictly: absent fields keep c's values, unknown fields are errors.
func decodeVersioned(data []byte, c any, checks ...func([]byte) error) error {
	var probe struct {
		Version string `json:"version"`
	}
	if err := yaml.Unmarshal(data, &probe); err != nil {
		return err
	}
	if probe.Version != Version {
		return fmt.Errorf("version: unsupported %q (want %q)", probe.Version, Version)
	}
	for _, check := range checks {
		if err := check(data); err != nil {
			return err
		}
	}
	return yaml.UnmarshalStrict(data, c)
}

// checkQuantities names the field of a quantity that does not parse
// (resource.Quantity's own error does not say which field it was).
func checkQuantities(data []byte) error {
	var raw map[string]any
	if err := yaml.Unmarshal(data, &raw); err != nil {
		return nil // reported by the strict decoding
	}
	for _, field := range []string{"memoryUnit", "reservedMemory"} {
		if v, ok := raw[field].(string); ok {
			if _, err := resource.ParseQuantity(v); err != nil {
				return fmt.Errorf("%s: %q is not a quantity (want e.g. 1Gi)", field, v)
			}
		}
	}
	return nil
}

// MinMemoryUnit is the smallest gpu-mem unit.
const MinMemoryUnit = 128 << 20

var hookLogLevels = []string{"error", "warn", "info", "debug"}

// Validate checks every field and reports all problems, each with its field name.
func (c *Config) Validate() error {
	var errs fieldErrors
	bad := errs.add
	errs.checkVersionAndNode(c.Version, c.NodeName)
	c.ComputePriority.check(bad)
	if c.SplitCount < 1 || c.SplitCount > 1000 {
		bad("splitCount", "%d out of range [1, 1000]", c.SplitCount)
	}
	unit := c.MemoryUnit.Value()
	switch {
	case unit < MinMemoryUnit:
		bad("memoryUnit", "%s below the minimum 128Mi", c.MemoryUnit.String())
	case unit%(1<<20) != 0:
		bad("memoryUnit", "%s is not a whole number of MiB", c.MemoryUnit.String())
	}
	if c.ReservedMemory.Sign() < 0 {
		bad("reservedMemory", "negative %s", c.ReservedMemory.String())
	}
	if c.Placement != PlacementBinpack && c.Placement != PlacementSpread {
		bad("placement", "%q (want %q or %q)", c.Placement, PlacementBinpack, PlacementSpread)
	}
	switch c.MIGStrategy {
	case MIGStrategyNone, MIGStrategyMixed:
	case MIGStrategySingle:
		bad("migStrategy", "%q is not supported: tessera.io/gpu is a time-shared slot with gpu-mem/gpu-core units, not a MIG slice; use %q (tessera.io/mig-<profile>)", c.MIGStrategy, MIGStrategyMixed)
	default:
		bad("migStrategy", "%q (want %q or %q)", c.MIGStrategy, MIGStrategyNone, MIGStrategyMixed)
	}
	switch c.DeviceListStrategy {
	case DeviceListEnvVar, DeviceListCDIAnnotations, DeviceListCDICRI:
	default:
		bad("deviceListStrategy", "%q (want %q, %q or %q)", c.DeviceListStrategy, DeviceListEnvVar, DeviceListCDIAnnotations, DeviceListCDICRI)
	}
	if err := ValidateCDIKind(c.CDIKind); err != nil {
		bad("cdiKind", "%v", err)
	}
	if d := c.RediscoverInterval.Duration; d != 0 && d < time.Second {
		bad("rediscoverInterval", "%s below 1s (0 disables)", d)
	}
	for field, p := range map[string]string{"hookLibrary": c.HookLibrary, "stateDir": c.StateDir,
		"kubeletSocketDir": c.KubeletSocketDir, "podResourcesSocket": c.PodResourcesSocket,
		"procRoot": c.ProcRoot, "devRoot": c.DevRoot} {
		if !filepath.IsAbs(p) {
			bad(field, "%q is not an absolute path", p)
		}
	}
	if c.ContextReserveMiB < 0 {
		bad("contextReserveMiB", "negative %d", c.ContextReserveMiB)
	}
	if !contains(hookLogLevels, c.HookLogLevel) {
		bad("hookLogLevel", "%q (want one of %s)", c.HookLogLevel, strings.Join(hookLogLevels, ", "))
	}
	if c.MetricsAddress != "" {
		if _, _, err := net.SplitHostPort(c.MetricsAddress); err != nil {
			bad("metricsAddress", "%q is not host:port (empty disables metrics)", c.MetricsAddress)
		}
	}
	if c.ReconcileInterval.Duration < time.Second {
		bad("reconcileInterval", "%s below 1s", c.ReconcileInterval.Duration)
	}
	c.Health.check(&errs)
	c.Log.check(&errs)
	return errors.Join(errs...)
}

// fieldErrors collects validation problems, each prefixed with its field.
type fieldErrors []error

func (e *fieldErrors) add(field, format string, args ...any) {
	*e = append(*e, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
}

// checkVersionAndNode checks the fields every configuration file starts with.
func (e *fieldErrors) checkVersionAndNode(version, nodeName string) {
	if version != Version {
		e.add("version", "unsupported %q (want %q)", version, Version)
	}
	if nodeName == "" {
		e.add("nodeName", "empty (set it, --node-name, or $NODE_NAME)")
	} else if msgs := validation.IsDNS1123Subdomain(nodeName); len(msgs) > 0 {
		e.add("nodeName", "%q: %s", nodeName, strings.Join(msgs, "; "))
	}
}

// check validates the health section (field names under "health.").
func (h HealthConfig) check(e *fieldErrors) {
	if h.RecoverAfter.Duration < 0 {
		e.add("health.recoverAfter", "negative %s", h.RecoverAfter.Duration)
	}
}

// check validates the log section (field names under "log.").
func (l LogConfig) check(e *fieldErrors) {
	if !contains([]string{"debug", "info", "warn", "error"}, l.Level) {
		e.add("log.level", "%q (want debug, info, warn or error)", l.Level)
	}
	if l.Format != "json" && l.Format != "text" {
		e.add("log.format", "%q (want json or text)", l.Format)
	}
}

// ValidateCDIKind checks a CDI kind ("vendor/class", e.g. nvidia.com/gpu)
// with the CDI library's own rules.
func ValidateCDIKind(kind string) error {
	vendor, class := parser.ParseQualifier(kind)
	if vendor == "" || class == "" {
		return fmt.Errorf("%q is not vendor/class (e.g. %s)", kind, DefaultCDIKind)
	}
	if err := parser.ValidateVendorName(vendor); err != nil {
		return fmt.Errorf("%q: %w", kind, err)
	}
	if err := parser.ValidateClassName(class); err != nil {
		return fmt.Errorf("%q: %w", kind, err)
	}
	return nil
}

// MemoryUnitBytes is the gpu-mem unit in bytes.
func (c *Config) MemoryUnitBytes() uint64 { return uint64(c.MemoryUnit.Value()) }

// ReservedMemoryBytes is the per-GPU reservation in bytes.
func (c *Config) ReservedMemoryBytes() uint64 { return uint64(c.ReservedMemory.Value()) }

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

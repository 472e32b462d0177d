package v1

import (
	"errors"
	"net"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
)

// SchedulerConfig is the Kubernetes scheduler process's (cluster-scheduler
// run) configuration file, `version: v1`, resolved like Config: defaults,
// then the file, then flags. The engine's queues, quotas and priorities
// are not here: they live in the scheduling engine's own versioned YAML
// (api/scheduler/v1), read from a ConfigMap and reloaded on change.
type SchedulerConfig struct {
	Version string `json:"version"`
	// SchedulerName is the spec.schedulerName of the pods this scheduler
	// places; every other pod stays with its own scheduler.
	SchedulerName string `json:"schedulerName"`
	// Kubeconfig is a kubeconfig file; empty uses the in-cluster config.
	Kubeconfig string `json:"kubeconfig,omitempty"`
	// KubeAPIQPS and KubeAPIBurst bound the client's request rate.
	KubeAPIQPS   float32 `json:"kubeAPIQPS"`
	KubeAPIBurst int     `json:"kubeAPIBurst"`
	// MetricsBindAddress serves /metrics, /healthz and /readyz.
	MetricsBindAddress string `json:"metricsBindAddress"`
	// Profiling adds Go's pprof handlers (/debug/pprof/) to the metrics
	// listener. Off by default: profiles expose the process's internals
	// to whoever reaches the port.
	Profiling bool `json:"profiling,omitempty"`
	// QueueConfigMap is namespace/name of a ConfigMap whose key
	// queueConfigKey holds the engine's SchedulerConfig YAML; empty uses the
	// engine's defaults (no queues).
	QueueConfigMap string `json:"queueConfigMap,omitempty"`
	QueueConfigKey string `json:"queueConfigKey"`
	// Policy is the placement policy (internal/placement's names; checked
	// when the scheduler starts, so this package does not link the engine).
	Policy string `json:"policy"`
	// MemoryUnit is the device plugin's gpu-mem unit; both must agree.
	MemoryUnit resource.Quantity `json:"memoryUnit"`
	// BindWorkers is how many binds and evictions run at once. Under load a
	// bind takes ~100 ms: 16 workers held tessera to ~150 binds/s behind
	// creation at client QPS 1000 in the 1,000-node benchmark; 64 kept up.
	BindWorkers int `json:"bindWorkers"`
	// BindAttempts is how often a bind that failed for a transient reason
	// (throttled, timed out, server error) is tried before the placement is
	// rolled back and the pod goes back to the queue.
	BindAttempts int `json:"bindAttempts"`
	// VolumeBindTimeout bounds how long a pod whose PersistentVolumeClaims
	// the scheduler chose volumes or a node for waits for the PV controller
	// to bind them before the pod itself is bound; past it the placement is
	// rolled back and the pod queued again (kube-scheduler's
	// VolumeBinding bindTimeoutSeconds, 600 by default).
	VolumeBindTimeout Duration `json:"volumeBindTimeout"`
	// PreemptionSearches bounds victim searches per scheduling cycle.
	PreemptionSearches int                  `json:"preemptionSearches"`
	LeaderElection     LeaderElectionConfig `json:"leaderElection"`
	Webhook            WebhookConfig        `json:"webhook"`
	Log                LogConfig            `json:"log"`
}

// WebhookConfig is the optional mutating admission webhook (off while
// BindAddress is empty): it sets schedulerName and defaults tessera.io/gpu:
// 1 for pods that request tessera.io/gpu-mem or gpu-core. The API server
// calls webhooks over TLS only, hence the certificate.
type WebhookConfig struct {
	BindAddress string `json:"bindAddress,omitempty"`
	CertFile    string `json:"certFile,omitempty"`
	KeyFile     string `json:"keyFile,omitempty"`
}

// LeaderElectionConfig is the coordination.k8s.io Lease two replicas share.
type LeaderElectionConfig struct {
	Enabled        bool   `json:"enabled"`
	LeaseNamespace string `json:"leaseNamespace"`
	LeaseName      string `json:"leaseName"`
	// LeaseDuration is how long a standby waits after the last renewal
	// before it takes over; RenewDeadline how long the leader keeps trying
	// to renew before it gives up leading; RetryPeriod how often both try.
	LeaseDuration Duration `json:"leaseDuration"`
	RenewDeadline Duration `json:"renewDeadline"`
	RetryPeriod   Duration `json:"retryPeriod"`
}

// DefaultSchedulerName is the scheduler name pods opt in with.
const DefaultSchedulerName = "tessera-scheduler"

// DefaultScheduler returns the scheduler process configuration used when
// nothing is set (kube-scheduler's lease timings).
func DefaultScheduler() *SchedulerConfig {
	return &SchedulerConfig{
		Version:            Version,
		SchedulerName:      DefaultSchedulerName,
		KubeAPIQPS:         50,
		KubeAPIBurst:       100,
		MetricsBindAddress: ":10259",
		QueueConfigKey:     "config.yaml",
		Policy:             "tessera",
		MemoryUnit:         resource.MustParse("1Gi"),
		BindWorkers:        64,
		BindAttempts:       3,
		VolumeBindTimeout:  Duration{10 * time.Minute},
		PreemptionSearches: 16,
		LeaderElection: LeaderElectionConfig{Enabled: true, LeaseNamespace: "kube-system", LeaseName: DefaultSchedulerName,
			LeaseDuration: Duration{15 * time.Second}, RenewDeadline: Duration{10 * time.Second}, RetryPeriod: Duration{2 * time.Second}},
		Log: LogConfig{Level: "info", Format: "json"},
	}
}

// LoadScheduler reads path over the defaults; empty returns the defaults.
func LoadScheduler(path string) (*SchedulerConfig, error) {
	return loadOver(path, DefaultScheduler(), ParseScheduler)
}

// ParseScheduler decodes YAML into c, keeping c's values for absent
// fields. Unknown fields are errors that name the field.
func ParseScheduler(data []byte, c *SchedulerConfig) error {
	return decodeVersioned(data, c)
}

// Validate checks every field and reports all problems, each with its field name.
func (c *SchedulerConfig) Validate() error {
	var errs fieldErrors
	bad := errs.add
	if c.Version != Version {
		bad("version", "unsupported %q (want %q)", c.Version, Version)
	}
	if msgs := validation.IsDNS1123Subdomain(c.SchedulerName); len(msgs) > 0 {
		bad("schedulerName", "%q: %s", c.SchedulerName, strings.Join(msgs, "; "))
	}
	if c.KubeAPIQPS <= 0 || c.KubeAPIBurst < 1 {
		bad("kubeAPIQPS", "%g with burst %d: both must be positive", c.KubeAPIQPS, c.KubeAPIBurst)
	}
	if _, _, err := net.SplitHostPort(c.MetricsBindAddress); err != nil {
		bad("metricsBindAddress", "%q is not host:port", c.MetricsBindAddress)
	}
	if c.QueueConfigMap != "" {
		if ns, name, ok := strings.Cut(c.QueueConfigMap, "/"); !ok || ns == "" || name == "" {
			bad("queueConfigMap", "%q (want namespace/name)", c.QueueConfigMap)
		}
	}
	if c.QueueConfigKey == "" {
		bad("queueConfigKey", "empty")
	}
	if c.Policy == "" {
		bad("policy", "empty (the scheduler names the policies it has when it starts)")
	}
	if u := c.MemoryUnit.Value(); u < MinMemoryUnit || u%(1<<20) != 0 {
		bad("memoryUnit", "%s: at least 128Mi and a whole number of MiB", c.MemoryUnit.String())
	}
	if c.BindWorkers < 1 || c.BindWorkers > 1024 {
		bad("bindWorkers", "%d out of range [1, 1024]", c.BindWorkers)
	}
	if c.BindAttempts < 1 || c.BindAttempts > 100 {
		bad("bindAttempts", "%d out of range [1, 100]", c.BindAttempts)
	}
	if c.VolumeBindTimeout.Duration < time.Second || c.VolumeBindTimeout.Duration > 24*time.Hour {
		bad("volumeBindTimeout", "%s out of range [1s, 24h]", c.VolumeBindTimeout.Duration)
	}
	if c.PreemptionSearches < 0 {
		bad("preemptionSearches", "negative %d", c.PreemptionSearches)
	}
	c.LeaderElection.check(&errs)
	if w := c.Webhook; w.BindAddress != "" {
		if _, _, err := net.SplitHostPort(w.BindAddress); err != nil {
			bad("webhook.bindAddress", "%q is not host:port", w.BindAddress)
		}
		if w.CertFile == "" || w.KeyFile == "" {
			bad("webhook.certFile", "the webhook serves TLS only: set certFile and keyFile")
		}
	}
	c.Log.check(&errs)
	return errors.Join(errs...)
}

// check validates the leader election section, with client-go's own
// ordering rule (leaseDuration > renewDeadline > retryPeriod × 1.2).
func (l LeaderElectionConfig) check(e *fieldErrors) {
	if !l.Enabled {
		return
	}
	if l.LeaseNamespace == "" || l.LeaseName == "" {
		e.add("leaderElection.leaseName", "namespace %q and name %q must both be set", l.LeaseNamespace, l.LeaseName)
	}
	if l.RetryPeriod.Duration <= 0 || float64(l.RenewDeadline.Duration) <= 1.2*float64(l.RetryPeriod.Duration) || l.LeaseDuration.Duration <= l.RenewDeadline.Duration {
		e.add("leaderElection.leaseDuration", "%s, renewDeadline %s, retryPeriod %s: want leaseDuration > renewDeadline > 1.2 × retryPeriod > 0",
			l.LeaseDuration.Duration, l.RenewDeadline.Duration, l.RetryPeriod.Duration)
	}
	// The Lease object stores whole seconds: client-go drops the fraction,
	// so a 1.5s lease would expire for the standby after 1s while the
	// leader still believes it has 1.5s.
	if l.LeaseDuration.Duration%time.Second != 0 {
		e.add("leaderElection.leaseDuration", "%s: must be a whole number of seconds (the Lease stores leaseDurationSeconds)", l.LeaseDuration.Duration)
	}
}

// MemoryUnitMiB is the gpu-mem unit in MiB.
func (c *SchedulerConfig) MemoryUnitMiB() uint64 { return uint64(c.MemoryUnit.Value() >> 20) }

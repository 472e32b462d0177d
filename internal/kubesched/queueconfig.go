package kubesched

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	schedv1 "github.com/tessera-gpu/tessera/api/scheduler/v1"
	"github.com/tessera-gpu/tessera/internal/engine"
	"github.com/tessera-gpu/tessera/internal/quota"
)

// readQueueConfig reads the queue ConfigMap: a new valid configuration
// rebuilds the engine with it; one that does not parse or validate keeps
// the last good one and says why — a Warning event on the ConfigMap, a
// log line, tessera_scheduler_config_reloads_total{result="error"} and
// tessera_scheduler_config_last_reload_successful 0.
func (s *Scheduler) readQueueConfig() {
	if s.configMaps == nil {
		return
	}
	ns, name := splitRef(s.cfg.QueueConfigMap)
	cm, err := s.configMaps.ConfigMaps(ns).Get(name)
	if err != nil {
		if s.cfgSeen != "absent" {
			s.cfgSeen = "absent"
			s.log.Warn("queue ConfigMap not found; keeping the current queue configuration", "configMap", s.cfg.QueueConfigMap)
		}
		return
	}
	// Compared by content: a resync or a metadata change is not a reload.
	seen := cm.ResourceVersion + "\x00" + cm.Data[s.cfg.QueueConfigKey]
	if seen == s.cfgSeen {
		return
	}
	s.cfgSeen = seen
	c, err := parseQueueConfig(cm, s.cfg.QueueConfigKey)
	if err != nil {
		s.metrics.ConfigReloads.WithLabelValues("error").Inc()
		s.metrics.ConfigLastGood.Set(0)
		msg := fmt.Sprintf("%v; keeping the last good configuration", err)
		s.log.Error("queue configuration refused", "configMap", s.cfg.QueueConfigMap, "err", err)
		s.recorder.Event(cm, corev1.EventTypeWarning, "InvalidSchedulerConfig", msg)
		return
	}
	s.engineCfg = c
	s.rebuildWanted = true
	s.metrics.ConfigReloads.WithLabelValues("ok").Inc()
	s.metrics.ConfigLastGood.Set(1)
	s.log.Info("queue configuration loaded", "configMap", s.cfg.QueueConfigMap, "resourceVersion", cm.ResourceVersion, "queues", len(c.Queues))
	s.recorder.Event(cm, corev1.EventTypeNormal, "SchedulerConfigLoaded", fmt.Sprintf("loaded (resourceVersion %s, %d queues)", cm.ResourceVersion, len(c.Queues)))
}

// parseQueueConfig reads and checks the engine configuration as the engine
// will use it, so a value only the engine or the quota books refuse is
// refused here too, not after the old configuration was dropped.
func parseQueueConfig(cm *corev1.ConfigMap, key string) (*schedv1.Config, error) {
	data, ok := cm.Data[key]
	if !ok {
		return nil, fmt.Errorf("ConfigMap %s/%s: no key %q", cm.Namespace, cm.Name, key)
	}
	c, err := schedv1.Parse([]byte(data))
	if err != nil {
		return nil, fmt.Errorf("ConfigMap %s/%s key %s: %w", cm.Namespace, cm.Name, key, err)
	}
	if _, err := engine.ConfigFrom(c); err != nil {
		return nil, fmt.Errorf("ConfigMap %s/%s key %s: %w", cm.Namespace, cm.Name, key, err)
	}
	if len(c.Queues) > 0 {
		if _, err := quota.New(c); err != nil {
			return nil, fmt.Errorf("ConfigMap %s/%s key %s: %w", cm.Namespace, cm.Name, key, err)
		}
	}
	return c, nil
}

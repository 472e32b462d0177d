package v1

import (
	"strings"
	"testing"
	"time"
)

func TestSchedulerConfigDefaultsValidate(t *testing.T) {
	if err := DefaultScheduler().Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestSchedulerConfigParsesOverDefaultsAndNamesBadFields(t *testing.T) {
	c := DefaultScheduler()
	if err := ParseScheduler([]byte("version: v1\nbindWorkers: 32\nvolumeBindTimeout: 90s\nleaderElection: {leaseName: s1, leaseDuration: 4s}\n"), c); err != nil {
		t.Fatal(err)
	}
	if c.BindWorkers != 32 || c.VolumeBindTimeout.Duration != 90*time.Second || c.LeaderElection.LeaseName != "s1" || c.LeaderElection.LeaseDuration.Duration != 4*time.Second || c.SchedulerName != DefaultSchedulerName {
		t.Fatalf("parsed %+v", c)
	}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "leaderElection.leaseDuration") {
		t.Fatalf("a lease of 4s under a renew deadline of 10s: %v", err)
	}
	frac := DefaultScheduler()
	frac.LeaderElection.LeaseDuration.Duration = 15500 * time.Millisecond
	if err := frac.Validate(); err == nil || !strings.Contains(err.Error(), "whole number of seconds") {
		t.Fatalf("a lease of 15.5s (the Lease stores whole seconds): %v", err)
	}
	if err := ParseScheduler([]byte("version: v1\nbindWorkerz: 3\n"), DefaultScheduler()); err == nil || !strings.Contains(err.Error(), "bindWorkerz") {
		t.Fatalf("unknown field: %v", err)
	}
	bad := DefaultScheduler()
	bad.QueueConfigMap, bad.BindWorkers, bad.SchedulerName = "nonamespace", 0, "Tessera_Scheduler"
	bad.Webhook.BindAddress = ":8443"
	bad.VolumeBindTimeout.Duration = 0
	err := bad.Validate()
	for _, f := range []string{"queueConfigMap", "bindWorkers", "schedulerName", "webhook.certFile", "volumeBindTimeout"} {
		if err == nil || !strings.Contains(err.Error(), f) {
			t.Errorf("error %v does not name %s", err, f)
		}
	}
}

// Package scheduler holds the end-to-end scenarios of cluster-scheduler run
// (tessera-scheduler) on a real control plane with kwok GPU nodes: placement
// within capacity, preemption, gangs, quotas, restart without loss or
// double booking, leader failover, bad input.
package scheduler

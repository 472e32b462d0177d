// Package priority will hold the P0–P3 priority classes, anti-starvation ageing
// and the preemption order shared by the scheduler and the node agent. Not
// implemented yet; see the open issues.
package priority

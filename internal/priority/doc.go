// Package priority holds tessera's four priority classes (P0 realtime
// inference … P3 evaluation/experiments), how a pod's class is resolved from
// its tessera.io/priority annotation or its PriorityClass value through a
// configurable table, anti-starvation ageing (a waiting pod's effective class
// rises with its wait, up to a bound), and the preemption order: who may
// evict whom. It knows nothing about Kubernetes objects; callers pass the
// annotation string and the PriorityClass value.
package priority

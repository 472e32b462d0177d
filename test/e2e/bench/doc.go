// Package bench is the end-to-end scheduler benchmark (make bench-e2e; its
// test is behind the bench build tag): on one control plane with kwok GPU
// nodes, pods per second bound by kube-scheduler v1.37.2 and by
// tessera-scheduler under the same API server and the same client rate
// limits (QPS 1000, burst 1000), after an unmeasured warm-up, in ABBA order
// with a fresh scheduler per pass (medians reported); then tessera with
// fractional pods; each scheduler's and the API server's CPU seconds per
// 1,000 pods; and tessera's p99 scheduling attempt latency.
package bench

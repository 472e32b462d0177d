// Package bench is the end-to-end scheduler benchmark (make bench-e2e; its
// test is behind the bench build tag): on one control plane with kwok GPU
// nodes, pods per second bound by kube-scheduler v1.37.2 and by
// tessera-scheduler, one after the other, under the same API server and the
// same client rate limits (QPS 1000, burst 1000), then tessera with
// fractional pods, and tessera's p99 scheduling attempt latency.
package bench

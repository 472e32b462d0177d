// Package e2e holds the end-to-end suite: real etcd, kube-apiserver,
// kube-controller-manager and kube-scheduler (hack/e2e-binaries.sh builds
// them into $TESSERA_CACHE/bin), kwok for the GPU nodes, and the tessera
// components under test. It is a module of its own so that the product
// module never carries a test harness's dependencies.
//
// Packages: binaries (where the pinned binaries are), pki (certificates),
// process (children that never outlive the test), controlplane, kwoknodes
// (GPU nodes with the device plugin's inventory), workload (pods and bind
// counting), cluster (one call for a test), bench (make bench-e2e).
package e2e

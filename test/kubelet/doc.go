// Package kubelet drives the tessera device plugin with kubelet's own device
// manager (k8s.io/kubernetes/pkg/kubelet/cm/devicemanager and its
// plugin/v1beta1 registration server). It is a separate module so that the
// main module never depends on k8s.io/kubernetes.
package kubelet

// Package kubelet drives the tessera device plugin with kubelet's own device
// manager (k8s.io/kubernetes/pkg/kubelet/cm/devicemanager and its
// plugin/v1beta1 registration server) and reads it back through kubelet's
// own PodResources v1 server (pkg/kubelet/apis/podresources) on a unix
// socket. It is a separate module so that the main module never depends on
// k8s.io/kubernetes.
package kubelet

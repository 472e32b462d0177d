package main

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tessera-gpu/tessera/internal/deviceplugin/kube"
	"github.com/tessera-gpu/tessera/internal/monitor/identity"
)

// eventPoster returns a function that records a Warning Event on a pod
// through the API server (the same client the device plugin uses).
func eventPoster(kubeconfig, node string) (func(ctx context.Context, owner identity.Owner, reason, message string), error) {
	client, err := kube.NewFromKubeconfig(kubeconfig)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, owner identity.Owner, reason, message string) {
		now := metav1.Now()
		ev := &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{GenerateName: owner.Pod + ".", Namespace: owner.Namespace},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: owner.Namespace, Name: owner.Pod, APIVersion: "v1", FieldPath: "spec.containers{" + owner.Container + "}"},
			Reason:         reason, Message: message, Type: corev1.EventTypeWarning,
			Source:         corev1.EventSource{Component: "tessera-vgpu-monitor", Host: node},
			FirstTimestamp: now, LastTimestamp: now, Count: 1,
		}
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_ = client.CreateEvent(ctx, ev) // best effort: the metric and log line already say it
	}, nil
}

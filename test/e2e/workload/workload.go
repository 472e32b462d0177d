// Package workload makes the pods of end-to-end tests and benchmarks,
// creates them with parallel clients, and watches them get bound.
package workload

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Scheduler names.
const (
	TesseraScheduler = "tessera-scheduler"
	DefaultScheduler = corev1.DefaultSchedulerName
)

// Resource names the device plugin advertises.
const (
	GPU       corev1.ResourceName = "tessera.io/gpu"
	GPUMemory corev1.ResourceName = "tessera.io/gpu-mem"
	GPUCore   corev1.ResourceName = "tessera.io/gpu-core"
)

// Image is the container image of every pod; kwok never pulls it.
const Image = "registry.k8s.io/pause:3.10"

// Pod is a one-container pod for scheduler with the given limits (extended
// resources are requested through limits; requests default to them).
func Pod(namespace, name, scheduler string, limits corev1.ResourceList) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{"app": "tessera-e2e"}},
		Spec: corev1.PodSpec{
			SchedulerName: scheduler,
			Containers: []corev1.Container{{
				Name:      "main",
				Image:     Image,
				Resources: corev1.ResourceRequirements{Limits: limits},
			}},
			TerminationGracePeriodSeconds: new(int64),
		},
	}
}

// WholeGPUPod requests gpus tessera.io/gpu.
func WholeGPUPod(namespace, name, scheduler string, gpus int64) *corev1.Pod {
	return Pod(namespace, name, scheduler, corev1.ResourceList{GPU: *apiresource.NewQuantity(gpus, apiresource.DecimalSI)})
}

// FractionalPod requests one GPU share: tessera.io/gpu 1 with memUnits of
// tessera.io/gpu-mem and corePercent of tessera.io/gpu-core.
func FractionalPod(namespace, name, scheduler string, memUnits, corePercent int64) *corev1.Pod {
	return Pod(namespace, name, scheduler, corev1.ResourceList{
		GPU:       *apiresource.NewQuantity(1, apiresource.DecimalSI),
		GPUMemory: *apiresource.NewQuantity(memUnits, apiresource.DecimalSI),
		GPUCore:   *apiresource.NewQuantity(corePercent, apiresource.DecimalSI),
	})
}

// Numbered makes n pods named <prefix>-00000… with build.
func Numbered(prefix string, n int, build func(name string) *corev1.Pod) []*corev1.Pod {
	pods := make([]*corev1.Pod, n)
	for i := range pods {
		pods[i] = build(fmt.Sprintf("%s-%05d", prefix, i))
	}
	return pods
}

// CreateNamespace creates namespace name.
func CreateNamespace(ctx context.Context, client kubernetes.Interface, name string) error {
	_, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create namespace %s: %w", name, err)
	}
	return nil
}

// Create creates pods with workers parallel requests (the client's rate
// limit still applies) and stops at the first error.
func Create(ctx context.Context, client kubernetes.Interface, pods []*corev1.Pod, workers int) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	next := make(chan *corev1.Pod)
	for range max(workers, 1) {
		wg.Go(func() {
			for p := range next {
				if _, err := client.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
					once.Do(func() { first = fmt.Errorf("create pod %s/%s: %w", p.Namespace, p.Name, err); cancel() })
				}
			}
		})
	}
	for _, p := range pods {
		select {
		case next <- p:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
	}
	close(next)
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err()
}

// DeleteAll deletes every pod in namespace at once (grace period 0: no
// kubelet has to confirm) and waits until none is left. A collection of
// thousands takes the API server long enough on a loaded machine that the
// request's stream may be cut (the server goes on deleting): the delete is
// then sent again every few seconds while pods remain, until ctx ends.
func DeleteAll(ctx context.Context, client kubernetes.Interface, namespace string) error {
	zero := int64(0)
	pods := client.CoreV1().Pods(namespace)
	deleteAll := func() error {
		return pods.DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
	}
	lastErr := deleteAll()
	lastSent := time.Now()
	for {
		list, err := pods.List(ctx, metav1.ListOptions{Limit: 1})
		if err == nil && len(list.Items) == 0 {
			return nil
		}
		if time.Since(lastSent) >= 5*time.Second {
			lastErr, lastSent = deleteAll(), time.Now()
		}
		if err := sleep(ctx); err != nil {
			rest := "some"
			if list != nil {
				rest = strconv.Itoa(len(list.Items))
				if list.RemainingItemCount != nil {
					rest = strconv.FormatInt(*list.RemainingItemCount+1, 10)
				}
			}
			return fmt.Errorf("delete pods in %s: %s left (last delete: %v): %w", namespace, rest, lastErr, err)
		}
	}
}

// sleep waits a poll interval, or returns ctx's error.
func sleep(ctx context.Context) error {
	t := time.NewTimer(200 * time.Millisecond)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

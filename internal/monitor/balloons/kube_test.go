package balloons

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	apiv1 "github.com/tessera-gpu/tessera/api/annotations/v1"
	"github.com/tessera-gpu/tessera/internal/monitor/identity"
)

type fakeAPI struct {
	pods      map[string]*corev1.Pod
	gets      int
	evicted   []string
	annotated map[string]string
}

func (f *fakeAPI) GetPod(_ context.Context, ns, name string) (*corev1.Pod, error) {
	f.gets++
	return f.pods[ns+"/"+name], nil
}

func (f *fakeAPI) EvictPod(_ context.Context, ns, name string) error {
	f.evicted = append(f.evicted, ns+"/"+name)
	return nil
}

func (f *fakeAPI) AnnotateNode(_ context.Context, _ string, a map[string]string) error {
	f.annotated = a
	return nil
}

func TestKubeAdapters(t *testing.T) {
	prio := int32(1000)
	f := &fakeAPI{pods: map[string]*corev1.Pod{
		"ns/owner": {ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{apiv1.BalloonKey: "true"}}, Spec: corev1.PodSpec{Priority: &prio}},
		"ns/b":     {ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{apiv1.BorrowedKey: "{}"}}},
		"ns/loan":  {ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{apiv1.BorrowedKey: `{"version":"v1","gpus":[{"uuid":"GPU-a","memoryMiB":512}]}`}}},
	}}
	pods := &KubePods{API: f, TTL: time.Minute}
	for range 3 {
		info, err := pods.Info(context.Background(), identity.Owner{Namespace: "ns", Pod: "owner"})
		if err != nil || info != (PodInfo{OptedIn: true, Priority: 1000}) {
			t.Fatalf("owner: %+v %v", info, err)
		}
	}
	if f.gets != 1 {
		t.Errorf("%d GETs for one pod within the TTL", f.gets)
	}
	// The opt-in is removed while the pod runs: Info may still answer from the
	// cache, Confirm (before a cap is lowered) must not.
	f.pods["ns/owner"] = &corev1.Pod{Spec: corev1.PodSpec{Priority: &prio}}
	if info, err := pods.Confirm(context.Background(), identity.Owner{Namespace: "ns", Pod: "owner"}); err != nil || info.OptedIn {
		t.Errorf("confirm after the opt-in was removed: %+v %v", info, err)
	}
	if info, _ := pods.Info(context.Background(), identity.Owner{Namespace: "ns", Pod: "owner"}); info.OptedIn {
		t.Errorf("the cache kept the removed opt-in after a confirm: %+v", info)
	}
	if info, _ := pods.Info(context.Background(), identity.Owner{Namespace: "ns", Pod: "b"}); !info.Borrower || info.OptedIn {
		t.Errorf("borrower: %+v", info)
	}
	if info, _ := pods.Info(context.Background(), identity.Owner{Namespace: "ns", Pod: "b"}); !info.BorrowerOn("GPU-x") {
		t.Errorf("an unreadable loan record must make a borrower everywhere: %+v", info)
	}
	if info, _ := pods.Info(context.Background(), identity.Owner{Namespace: "ns", Pod: "loan"}); !info.BorrowerOn("GPU-a") || info.BorrowerOn("GPU-x") {
		t.Errorf("loan on GPU-a only: %+v", info)
	}
	st := metav1.NewTime(time.Unix(1_700_000_000, 0))
	if info := InfoOf(&corev1.Pod{Status: corev1.PodStatus{StartTime: &st}}); !info.Started.Equal(st.Time) {
		t.Errorf("start time %v, want %v", info.Started, st.Time)
	}
	if err := (KubeEvictor{API: f}).Evict(context.Background(), identity.Owner{Namespace: "ns", Pod: "b"}); err != nil || f.evicted[0] != "ns/b" {
		t.Errorf("evict: %v %v", f.evicted, err)
	}
	s := apiv1.NodeBalloons{Version: apiv1.Version, GPUs: []apiv1.GPUBalloon{{UUID: "GPU-a", ReclaimableMiB: 5}}}
	if err := (NodeAnnotation{API: f, Node: "n"}).Publish(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	got, err := apiv1.ParseNodeBalloons(f.annotated[apiv1.NodeBalloonsKey])
	if err != nil || got.GPUs[0].ReclaimableMiB != 5 {
		t.Fatalf("published %v: %+v %v", f.annotated, got, err)
	}
}

// age makes every cached entry d older.
func (k *KubePods) age(d time.Duration) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for key, c := range k.cache {
		c.at = c.at.Add(-d)
		k.cache[key] = c
	}
}

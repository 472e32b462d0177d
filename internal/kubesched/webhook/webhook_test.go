package webhook

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
)

func review(t *testing.T, h *Handler, pod *corev1.Pod) *admissionv1.AdmissionResponse {
	t.Helper()
	raw, _ := json.Marshal(pod)
	in, _ := json.Marshal(&admissionv1.AdmissionReview{Request: &admissionv1.AdmissionRequest{UID: "u1", Object: runtime.RawExtension{Raw: raw}}})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/mutate", bytes.NewReader(in)))
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Response == nil || out.Response.UID != "u1" {
		t.Fatalf("response %s: %v", rec.Body, err)
	}
	return out.Response
}

func container(limits map[corev1.ResourceName]string, requests bool) corev1.Container {
	rl := corev1.ResourceList{}
	for k, v := range limits {
		rl[k] = resource.MustParse(v)
	}
	c := corev1.Container{Name: "c", Resources: corev1.ResourceRequirements{Limits: rl}}
	if requests {
		c.Resources.Requests = rl.DeepCopy()
	}
	return c
}

func TestSetsSchedulerAndDefaultsOneGPU(t *testing.T) {
	h := &Handler{SchedulerName: "tessera-scheduler"}
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{
		container(map[corev1.ResourceName]string{corev1.ResourceCPU: "1"}, false),
		container(map[corev1.ResourceName]string{mem: "8", core: "30"}, true),
		container(map[corev1.ResourceName]string{gpu: "2", core: "200"}, false),
	}}}
	resp := review(t, h, pod)
	if !resp.Allowed || resp.PatchType == nil {
		t.Fatalf("response %+v", resp)
	}
	var ops []patchOp
	_ = json.Unmarshal(resp.Patch, &ops)
	want := []string{"/spec/schedulerName", "/spec/containers/1/resources/limits/tessera.io~1gpu", "/spec/containers/1/resources/requests/tessera.io~1gpu"}
	if len(ops) != len(want) {
		t.Fatalf("patch %s", resp.Patch)
	}
	for i, op := range ops {
		if op.Path != want[i] || op.Op != "add" {
			t.Fatalf("op %d: %+v, want add %s", i, op, want[i])
		}
	}
}

func TestLeavesOtherPodsAlone(t *testing.T) {
	h := &Handler{SchedulerName: "tessera-scheduler"}
	plain := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{container(map[corev1.ResourceName]string{corev1.ResourceCPU: "1"}, false)}}}
	if resp := review(t, h, plain); !resp.Allowed || len(resp.Patch) != 0 {
		t.Fatalf("a pod without GPU shares was patched: %s", resp.Patch)
	}
	custom := &corev1.Pod{Spec: corev1.PodSpec{SchedulerName: "volcano", Containers: []corev1.Container{container(map[corev1.ResourceName]string{gpu: "1", mem: "4"}, false)}}}
	if resp := review(t, h, custom); !resp.Allowed || len(resp.Patch) != 0 {
		t.Fatalf("a pod of another scheduler with a GPU count was patched: %s", resp.Patch)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/mutate", bytes.NewReader([]byte("{"))))
	if rec.Code != http.StatusBadRequest {
		t.Fatalf("garbage got %d", rec.Code)
	}
}

// Package webhook is the optional mutating admission webhook of
// cluster-scheduler run (off unless --webhook-bind-address is set): for a
// pod that requests tessera.io/gpu-mem or tessera.io/gpu-core it sets
// spec.schedulerName to the tessera scheduler (when the pod left it to the
// default scheduler) and defaults tessera.io/gpu: 1 in every container that
// asks for a share without a GPU count, so users write only the share and
// quotas on tessera.io/gpu count it. Pods without those resources pass
// unchanged; a pod naming another scheduler keeps it.
package webhook

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Resource names (as in internal/kubesched/translate; repeated here so the
// webhook needs nothing of the engine).
const (
	gpu  corev1.ResourceName = "tessera.io/gpu"
	mem  corev1.ResourceName = "tessera.io/gpu-mem"
	core corev1.ResourceName = "tessera.io/gpu-core"
)

// maxBody bounds an AdmissionReview (a pod spec is far smaller).
const maxBody = 4 << 20

// Handler answers AdmissionReview v1 requests for pods.
type Handler struct {
	SchedulerName string
}

type patchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// ServeHTTP decodes the review, mutates, and answers; a request it cannot
// read is answered 400 with the reason (the API server then applies the
// webhook's failurePolicy).
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
	if err != nil {
		http.Error(w, "read body: "+err.Error(), http.StatusBadRequest)
		return
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil || review.Request == nil {
		http.Error(w, fmt.Sprintf("not an AdmissionReview v1 with a request: %v", err), http.StatusBadRequest)
		return
	}
	resp := &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
	if patch, err := h.Patch(review.Request.Object.Raw); err != nil {
		resp.Allowed = false
		resp.Result = &metav1.Status{Code: http.StatusBadRequest, Message: err.Error()}
	} else if len(patch) > 0 {
		raw, _ := json.Marshal(patch)
		pt := admissionv1.PatchTypeJSONPatch
		resp.Patch, resp.PatchType = raw, &pt
	}
	review.Response, review.Request = resp, nil
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(&review)
}

// Patch is the JSON patch for a pod's raw JSON (empty: nothing to change).
func (h *Handler) Patch(raw []byte) ([]patchOp, error) {
	var pod corev1.Pod
	if err := json.Unmarshal(raw, &pod); err != nil {
		return nil, fmt.Errorf("pod: %w", err)
	}
	var ops []patchOp
	asksShare := false
	for i, c := range pod.Spec.Containers {
		if !hasShare(c.Resources) {
			continue
		}
		asksShare = true
		if has(c.Resources, gpu) {
			continue
		}
		base := fmt.Sprintf("/spec/containers/%d/resources", i)
		ops = append(ops, addResource(base, "limits", c.Resources.Limits)...)
		if len(c.Resources.Requests) > 0 {
			ops = append(ops, addResource(base, "requests", c.Resources.Requests)...)
		}
	}
	if asksShare && (pod.Spec.SchedulerName == "" || pod.Spec.SchedulerName == corev1.DefaultSchedulerName) {
		ops = append([]patchOp{{Op: "add", Path: "/spec/schedulerName", Value: h.SchedulerName}}, ops...)
	}
	return ops, nil
}

func hasShare(r corev1.ResourceRequirements) bool { return has(r, mem) || has(r, core) }

func has(r corev1.ResourceRequirements, n corev1.ResourceName) bool {
	_, inLimits := r.Limits[n]
	_, inRequests := r.Requests[n]
	return inLimits || inRequests
}

// addResource adds tessera.io/gpu: 1 to the limits or requests map at
// base, creating the map when the container has none.
func addResource(base, field string, list corev1.ResourceList) []patchOp {
	if list == nil {
		return []patchOp{{Op: "add", Path: base + "/" + field, Value: map[string]string{string(gpu): "1"}}}
	}
	return []patchOp{{Op: "add", Path: base + "/" + field + "/" + escape(string(gpu)), Value: "1"}}
}

// escape is JSON pointer escaping (RFC 6901).
func escape(s string) string { return strings.NewReplacer("~", "~0", "/", "~1").Replace(s) }

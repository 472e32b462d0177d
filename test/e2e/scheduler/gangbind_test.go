package scheduler

import (
	"context"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/tessera-gpu/tessera/test/e2e/kwoknodes"
	"github.com/tessera-gpu/tessera/test/e2e/scrape"
	"github.com/tessera-gpu/tessera/test/e2e/tesserascheduler"
	"github.com/tessera-gpu/tessera/test/e2e/workload"
)

// A gang member whose Binding the API server refuses, on a real API
// server: a ValidatingAdmissionPolicy denies the pods/binding create of one
// member. What docs/scheduler.md promises for it ("Not done", run):
//
//   - a refusal that goes away: the member's capacity stays held (a pod
//     arriving meanwhile does not get it), the bind is retried there with
//     a FailedScheduling event saying so, and the whole group ends bound;
//   - a refusal that stays: after the retries the member's placement is
//     released (the event says it was rolled back), the members already
//     bound keep running, and the member is queued again alone — it lands
//     by itself once the refusal goes, without waiting for its group.
//
// No GPU is oversubscribed at any point checked.
func TestGangMemberBindFailure(t *testing.T) {
	c, ctx := setup(t, kwoknodes.UniformNodes("gang", 1, kwoknodes.L4, 4))
	s := startScheduler(t, ctx, c, tesserascheduler.Options{})
	began := time.Now() // the scenario's own time, logged step by step
	eventually := func(t *testing.T, ctx context.Context, what string, cond func() bool) {
		t.Helper()
		eventually(t, ctx, what, cond)
		t.Logf("%6.1fs %s", time.Since(began).Seconds(), what)
	}
	client := c.Client()
	node := c.Nodes[0].Name
	gang := func(group string) []*corev1.Pod {
		return numbered(group, 3, func(_ int, name string) *corev1.Pod {
			return withAnnotations(workload.WholeGPUPod(ns, name, workload.TesseraScheduler, 1), "tessera.io/pod-group", group, "tessera.io/min-member", "3")
		})
	}

	// A refusal that goes away.
	allow := denyBinding(t, ctx, client, "train-001")
	create(t, ctx, c, gang("train")...)
	eventually(t, ctx, "train-001's refusal reported", func() bool {
		return hasEvent(ctx, client, "train-001", "FailedScheduling", "the capacity stays held and the bind is retried (1 of 4)")
	})
	if got := scrapeLabelled(ctx, s.MetricsURL, "tessera_scheduler_bind_errors_total", "reason", "rejected"); got < 1 {
		t.Fatalf("bind_errors_total{reason=rejected} = %g, want ≥ 1", got)
	}
	eventually(t, ctx, "train-000 and train-002 bound", func() bool {
		return nodeOf(t, ctx, client, "train-000") != "" && nodeOf(t, ctx, client, "train-002") != ""
	})
	// The fourth GPU is free, the third is held for train-001: of two
	// pods arriving now, one is bound and the other waits.
	create(t, ctx, c, numbered("other", 2, func(_ int, name string) *corev1.Pod {
		return workload.WholeGPUPod(ns, name, workload.TesseraScheduler, 1)
	})...)
	eventually(t, ctx, "one other pod bound", func() bool {
		return nodeOf(t, ctx, client, "other-000") != "" || nodeOf(t, ctx, client, "other-001") != ""
	})
	if nodeOf(t, ctx, client, "train-001") != "" {
		t.Fatal("train-001 bound while its Binding is denied")
	}
	eventually(t, ctx, "train-001's whole GPU shown promised on "+node, func() bool {
		return scrapeLabelled(ctx, s.MetricsURL, "tessera_scheduler_node_gpu_compute_promised_milli", "node", node) == 1000
	})
	checkCapacity(t, ctx, client)
	allow()
	eventually(t, ctx, "train-001 bound once its Binding is allowed", func() bool { return nodeOf(t, ctx, client, "train-001") == node })
	eventually(t, ctx, "the other waiting pod told why", func() bool {
		waiting := "other-000"
		if nodeOf(t, ctx, client, waiting) != "" {
			waiting = "other-001"
		}
		return hasEvent(ctx, client, waiting, "FailedScheduling", "0/1 nodes are available: 1 Insufficient tessera.io/gpu.")
	})
	if nodeOf(t, ctx, client, "other-000") != "" && nodeOf(t, ctx, client, "other-001") != "" {
		t.Fatal("both other pods bound: one took the GPU held for train-001")
	}
	if got := checkCapacity(t, ctx, client); got != 4 {
		t.Fatalf("%d pods bound, want the gang of 3 and one other", got)
	}
	if err := workload.DeleteAll(ctx, client, ns); err != nil {
		t.Fatal(err)
	}
	t.Logf("%6.1fs pods deleted", time.Since(began).Seconds())

	// A refusal that stays until the retries are spent.
	allow = denyBinding(t, ctx, client, "run-001")
	create(t, ctx, c, gang("run")...)
	eventually(t, ctx, "run-001 rolled back after its retries", func() bool {
		return hasEvent(ctx, client, "run-001", "FailedScheduling", "the placement was rolled back and the pod is queued again")
	})
	for _, retry := range []string{"(2 of 4)", "(3 of 4)", "(4 of 4)"} {
		if !hasEvent(ctx, client, "run-001", "FailedScheduling", "the capacity stays held and the bind is retried "+retry) {
			t.Errorf("no event for retry %s before the rollback", retry)
		}
	}
	if nodeOf(t, ctx, client, "run-000") == "" || nodeOf(t, ctx, client, "run-002") == "" || nodeOf(t, ctx, client, "run-001") != "" {
		t.Fatal("want run-000 and run-002 bound and run-001 not after the rollback")
	}
	checkCapacity(t, ctx, client)
	allow()
	eventually(t, ctx, "run-001 bound alone once its Binding is allowed", func() bool { return nodeOf(t, ctx, client, "run-001") == node })
	if got := checkCapacity(t, ctx, client); got != 3 {
		t.Fatalf("%d pods bound, want the gang of 3", got)
	}
}

// denyBinding installs a ValidatingAdmissionPolicy (and its binding) that
// refuses the Binding of the named pods, waits until the API server
// enforces it, and returns a func that removes it and waits until it is
// no longer enforced. A dry-run Binding of a pod that never exists tells
// which: refused by the policy while it holds, not found after.
func denyBinding(t *testing.T, ctx context.Context, client kubernetes.Interface, pods ...string) (allow func()) {
	t.Helper()
	const probe = "bind-probe"
	names := make([]string, 0, len(pods)+1)
	for _, p := range append(pods, probe) {
		names = append(names, "'"+p+"'")
	}
	name := "deny-binding-" + pods[0]
	fail := admissionv1.Fail
	policy := &admissionv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Create},
					Rule:       admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods/binding"}},
				},
			}}},
			Validations: []admissionv1.Validation{{
				Expression: "!(object.metadata.name in [" + strings.Join(names, ", ") + "])",
				Message:    "binding refused by the test's admission policy",
			}},
		},
	}
	binding := &admissionv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        name,
			ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny},
		},
	}
	api := client.AdmissionregistrationV1()
	if _, err := api.ValidatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := api.ValidatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	enforced := func() bool {
		err := client.CoreV1().Pods(ns).Bind(ctx, &corev1.Binding{
			ObjectMeta: metav1.ObjectMeta{Name: probe, Namespace: ns},
			Target:     corev1.ObjectReference{Kind: "Node", Name: "nowhere"},
		}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil && !apierrors.IsNotFound(err) && !strings.Contains(err.Error(), "binding refused by the test's admission policy") {
			t.Logf("probe %s: %v", probe, err)
		}
		return err != nil && strings.Contains(err.Error(), "binding refused by the test's admission policy")
	}
	eventually(t, ctx, "the policy "+name+" enforced", enforced)
	return func() {
		t.Helper()
		if err := api.ValidatingAdmissionPolicyBindings().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := api.ValidatingAdmissionPolicies().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, ctx, "the policy "+name+" lifted", func() bool { return !enforced() })
	}
}

// scrapeLabelled is the value of the series name{label="value"} (counter or
// gauge), -1 when the scrape fails or the series is absent.
func scrapeLabelled(ctx context.Context, url, name, label, value string) float64 {
	fams, err := scrape.Families(ctx, url+"/metrics")
	if err != nil || fams[name] == nil {
		return -1
	}
	for _, m := range fams[name].Metric {
		for _, l := range m.Label {
			if l.GetName() == label && l.GetValue() == value {
				if m.Counter != nil {
					return m.GetCounter().GetValue()
				}
				return m.GetGauge().GetValue()
			}
		}
	}
	return -1
}

// Package bind carries the scheduler's decisions to the API server off the
// scheduling cycle: binds (one Binding per pod, its metadata carrying the
// tessera.io/assignment annotation, which kube-apiserver copies onto the
// Pod in the same update that sets spec.nodeName), evictions through the
// Eviction API (PodDisruptionBudgets are the API server's to enforce: a
// 429 comes back as Blocked) and status patches (PodScheduled=False,
// nominatedNodeName). A pool of workers runs them; outcomes are handed back
// to the scheduling loop, which alone changes the engine.
package bind

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// Kind says what a job does.
type Kind int

// Job kinds.
const (
	Bind  Kind = iota // bind Pod to Node with Annotations
	Evict             // evict Victims in order, stopping at the first refusal
	Patch             // patch Pod's status (Condition and/or Nominated)
)

// Job is one piece of API work.
type Job struct {
	Kind      Kind
	Namespace string
	Name      string
	UID       types.UID
	// Bind
	Node        string
	Annotations map[string]string
	// PreBind, when set, runs instead of the Binding (the pod's volumes are
	// bound: internal/kubesched/volumes) and comes back as an outcome with
	// PreBound, or with PreBindFailed and its Err; the caller then submits
	// the Binding (the job without PreBind) if the placement still stands:
	// it may have been undone while the step waited. It runs on a
	// goroutine of its own, not a worker: it waits for the PV controller,
	// which may take minutes, and must not hold up other pods' binds.
	PreBind func(context.Context) error
	// Evict: victims as namespace/name with UIDs; For is the preemptor's key,
	// or with Reclaim the owner the victims (borrowers) give memory back to.
	Victims []Victim
	For     string
	Reclaim bool
	// Patch: a nil Condition leaves conditions alone; Nominated is the
	// node to nominate ("" clears it) when SetNominated.
	Condition    *corev1.PodCondition
	SetNominated bool
	Nominated    string
}

// Victim is one pod to evict.
type Victim struct {
	Namespace, Name string
	UID             types.UID
}

// Key is the pod's namespace/name.
func (j *Job) Key() string { return j.Namespace + "/" + j.Name }

// Outcome is what became of a job.
type Outcome struct {
	Job *Job
	Err error
	// Bind: the pod is already bound to AlreadyOn (a bind that timed out
	// but went through, or another writer); Gone: the pod no longer exists
	// (or is another pod of the same name).
	AlreadyOn string
	Gone      bool
	// PreBindFailed: Err is PreBind's; no Binding was sent.
	PreBindFailed bool
	// PreBound: PreBind succeeded; no Binding was sent.
	PreBound bool
	// Evict: Evicted victims went (or were already gone); Blocked is the
	// first victim the API server refused (429: a PodDisruptionBudget),
	// with Err; the rest were not tried.
	Evicted []Victim
	Blocked *Victim
	// Took is how long the API work took, retries included.
	Took time.Duration
}

// Pool runs jobs on workers and collects outcomes.
type Pool struct {
	ctx      context.Context // the workers' (pre-binds stop with them)
	client   kubernetes.Interface
	attempts int
	jobs     chan *Job
	mu       sync.Mutex
	out      []Outcome
	ready    chan struct{}
	wg       sync.WaitGroup
}

// New starts workers; they stop when ctx ends. attempts bounds tries of a
// bind that fails for a transient reason.
func New(ctx context.Context, client kubernetes.Interface, workers, attempts int) *Pool {
	p := &Pool{ctx: ctx, client: client, attempts: max(attempts, 1), jobs: make(chan *Job, 4096), ready: make(chan struct{}, 1)}
	for range workers {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			for {
				select {
				case <-ctx.Done():
					return
				case j := <-p.jobs:
					p.finish(p.run(ctx, j))
				}
			}
		}()
	}
	return p
}

// Submit queues a job; it blocks only when thousands are queued already.
// A bind with a PreBind step runs only the step, off the workers.
func (p *Pool) Submit(ctx context.Context, j *Job) {
	if j.Kind == Bind && j.PreBind != nil {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.preBind(p.ctx, j)
		}()
		return
	}
	select {
	case p.jobs <- j:
	case <-ctx.Done():
	}
}

// Ready is signalled when outcomes wait to be taken.
func (p *Pool) Ready() <-chan struct{} { return p.ready }

// Take returns the outcomes so far and forgets them.
func (p *Pool) Take() []Outcome {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.out
	p.out = nil
	return out
}

// Wait blocks until every worker has stopped (after ctx ended).
func (p *Pool) Wait() { p.wg.Wait() }

// preBind runs j's PreBind and hands back how it went. It does not send
// the Binding itself: only the caller knows whether the placement still
// stands after the wait.
func (p *Pool) preBind(ctx context.Context, j *Job) {
	start := time.Now()
	if err := j.PreBind(ctx); err != nil {
		p.finish(Outcome{Job: j, Err: err, PreBindFailed: true, Took: time.Since(start)})
		return
	}
	p.finish(Outcome{Job: j, PreBound: true, Took: time.Since(start)})
}

func (p *Pool) finish(o Outcome) {
	p.mu.Lock()
	p.out = append(p.out, o)
	p.mu.Unlock()
	select {
	case p.ready <- struct{}{}:
	default:
	}
}

func (p *Pool) run(ctx context.Context, j *Job) Outcome {
	start := time.Now()
	var o Outcome
	switch j.Kind {
	case Bind:
		o = p.bind(ctx, j)
	case Evict:
		o = p.evict(ctx, j)
	case Patch:
		o = Outcome{Job: j, Err: p.patch(ctx, j)}
	}
	o.Took = time.Since(start)
	return o
}

// transient errors are worth another try of the same request.
func transient(err error) bool {
	return apierrors.IsTooManyRequests(err) || apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) ||
		apierrors.IsInternalError(err) || apierrors.IsServiceUnavailable(err) || apierrors.IsUnexpectedServerError(err)
}

func (p *Pool) bind(ctx context.Context, j *Job) Outcome {
	b := &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: j.Namespace, Name: j.Name, UID: j.UID, Annotations: j.Annotations},
		Target:     corev1.ObjectReference{Kind: "Node", Name: j.Node},
	}
	var err error
	for try := 0; try < p.attempts; try++ {
		if try > 0 {
			time.Sleep(time.Duration(try) * 100 * time.Millisecond)
		}
		err = p.client.CoreV1().Pods(j.Namespace).Bind(ctx, b, metav1.CreateOptions{})
		if err == nil || !transient(err) {
			break
		}
	}
	o := Outcome{Job: j, Err: err}
	if err == nil {
		return o
	}
	if apierrors.IsNotFound(err) {
		o.Gone = true
		return o
	}
	// A conflict may be our own earlier try that went through, another
	// writer, or a new pod under the old name (UID precondition): ask.
	if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) || transient(err) {
		pod, gerr := p.client.CoreV1().Pods(j.Namespace).Get(ctx, j.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(gerr):
			o.Gone = true
		case gerr == nil && j.UID != "" && pod.UID != j.UID:
			o.Gone = true
		case gerr == nil && pod.Spec.NodeName != "":
			o.AlreadyOn = pod.Spec.NodeName
			if pod.Spec.NodeName == j.Node && carries(pod, j.Annotations) {
				o.Err = nil // our bind went through
			}
		}
	}
	return o
}

// carries says whether pod has every annotation a bind carried (the assignment
// and, for a borrower, its borrowed record).
func carries(pod *corev1.Pod, ann map[string]string) bool {
	for k, v := range ann {
		if pod.Annotations[k] != v {
			return false
		}
	}
	return true
}

func (p *Pool) evict(ctx context.Context, j *Job) Outcome {
	o := Outcome{Job: j}
	for i := range j.Victims {
		v := j.Victims[i]
		ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: v.Namespace, Name: v.Name},
			DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &v.UID}}}
		if v.UID == "" {
			ev.DeleteOptions = nil
		}
		err := p.client.CoreV1().Pods(v.Namespace).EvictV1(ctx, ev)
		if err == nil || apierrors.IsNotFound(err) || apierrors.IsConflict(err) { // gone, or another pod under the name
			o.Evicted = append(o.Evicted, v)
			continue
		}
		o.Blocked, o.Err = &v, fmt.Errorf("evict %s/%s: %w", v.Namespace, v.Name, err)
		return o
	}
	return o
}

func (p *Pool) patch(ctx context.Context, j *Job) error {
	status := map[string]any{}
	if j.Condition != nil {
		status["conditions"] = []corev1.PodCondition{*j.Condition}
	}
	if j.SetNominated {
		if j.Nominated == "" {
			status["nominatedNodeName"] = nil
		} else {
			status["nominatedNodeName"] = j.Nominated
		}
	}
	body, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		return err
	}
	_, err = p.client.CoreV1().Pods(j.Namespace).Patch(ctx, j.Name, types.StrategicMergePatchType, body, metav1.PatchOptions{}, "status")
	if apierrors.IsNotFound(err) {
		return nil // the pod went meanwhile: nothing to say about it
	}
	if err != nil {
		return fmt.Errorf("patch status of %s: %w", j.Key(), err)
	}
	return nil
}

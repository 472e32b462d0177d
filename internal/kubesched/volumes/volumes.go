// Package volumes decides, by kube-scheduler's VolumeBinding rules, whether
// a pod's PersistentVolumeClaims let it run on a node, and binds them before
// the pod is bound, as kube-scheduler's volume binder does:
//
//   - a claim that is missing, being deleted, lost, or (generic ephemeral
//     volume) not created for the pod refuses every node;
//   - a claim bound to a PersistentVolume admits the nodes the volume's node
//     affinity admits;
//   - an unbound claim of an Immediate StorageClass (or of none) refuses
//     every node: the PV controller binds it, and its update wakes the pod;
//   - an unbound claim of a WaitForFirstConsumer StorageClass admits a node
//     with an available volume that matches it there
//     (volume.FindMatchingVolume; two claims of one pod never take the same
//     volume), or a node its class can provision on (a real provisioner,
//     allowedTopologies admitting the node); a claim already given a
//     selected node admits that node alone.
//
// The matching is k8s.io/component-helpers/storage/volume's, the very code
// kube-scheduler and the PV controller call; refusals carry kube-scheduler's
// (v1.37) words. Before the Binding, Assume records the volumes chosen on the
// node (a volume chosen for one pod is not offered to another until the API
// server shows it taken: kube-scheduler's assume cache) and Plan.Bind writes
// them (the volume's claimRef; the claim's volume.kubernetes.io/selected-node)
// and waits until the PV controller has bound every claim. What a previous
// scheduler already wrote is found again by the same rules and not written
// twice.
//
// A claim with the ReadWriteOncePod access mode that another pod uses (bound
// to a node, or placed and being bound) refuses every node, as
// kube-scheduler's VolumeRestrictions does, before the volume rules.
//
// Not evaluated: CSI attach-count limits (NodeVolumeLimits), storage capacity
// (CSIStorageCapacity), inline disk conflicts (VolumeRestrictions' other half)
// and zone labels on volumes without node affinity (VolumeZone).
package volumes

import (
	"encoding/json"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/component-helpers/storage/ephemeral"
	"k8s.io/component-helpers/storage/volume"
)

// Refusals, in kube-scheduler v1.37's words (VolumeBinding's filter reasons
// and its PreFilter's).
const (
	NodeConflict     = "node(s) didn't match PersistentVolume's node affinity"
	BindConflict     = "node(s) didn't find available persistent volumes to bind"
	PVNotExist       = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"
	UnboundImmediate = "pod has unbound immediate PersistentVolumeClaims"
	// InUseReadWriteOncePod is VolumeRestrictions' reason.
	InUseReadWriteOncePod = "node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode already in-use by another pod"
)

// Claim is one of a pod's volumes backed by a PersistentVolumeClaim.
type Claim struct {
	Name string `json:"n"`
	// Ephemeral: a generic ephemeral volume, whose claim
	// (<pod>-<volume>) the ephemeral volume controller creates for the pod.
	Ephemeral bool `json:"e,omitempty"`
}

// Pod is what the volume rules read of a pod.
type Pod struct {
	Namespace string    `json:"ns"`
	Name      string    `json:"-"`
	UID       types.UID `json:"u,omitempty"` // set only with an ephemeral claim: the claim must be the pod's
	Claims    []Claim   `json:"c"`
}

// For reads a pod's claims; nil for a pod without any (the rules leave it
// alone).
func For(p *corev1.Pod) *Pod {
	var v *Pod // allocated at the first claim: most pods have none
	for i := range p.Spec.Volumes {
		vol := &p.Spec.Volumes[i]
		if v == nil && (vol.PersistentVolumeClaim != nil || vol.Ephemeral != nil) {
			v = &Pod{Namespace: p.Namespace, Name: p.Name}
		}
		switch {
		case vol.PersistentVolumeClaim != nil:
			v.Claims = append(v.Claims, Claim{Name: vol.PersistentVolumeClaim.ClaimName})
		case vol.Ephemeral != nil:
			v.Claims = append(v.Claims, Claim{Name: ephemeral.VolumeClaimName(p, vol), Ephemeral: true})
			v.UID = p.UID
		}
	}
	return v
}

// Key is the canonical text of what the rules read of the pod: pods equal
// in it (replicas sharing one claim) are alike to the filter.
func (v *Pod) Key() string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%#v", *v) // never reached: the fields always marshal
	}
	return string(b)
}

// Binder answers the rules from the informers' caches plus its own
// assumptions. Its methods other than Plan.Bind belong to one goroutine
// (the scheduling loop).
type Binder struct {
	claims  corelisters.PersistentVolumeClaimLister
	volumes corelisters.PersistentVolumeLister
	classes storagelisters.StorageClassLister
	users   Users
	// Volumes and claims changed by Assume and not yet written back by the
	// API server, by name (claims by namespace/name).
	pvs  map[string]*assumption[*corev1.PersistentVolume]
	pvcs map[string]*assumption[*corev1.PersistentVolumeClaim]
}

// assumption is an object as Assume changed it: it stands for the cached
// object while the cache still holds the version it was made from (base);
// a newer version (our own write, or someone else's) wins.
type assumption[T metav1.Object] struct {
	obj   T
	base  string
	owner string
}

// Users reports whether a pod uses claim namespace/name: bound to a node, or
// placed and being bound (never the pod asked about, which waits).
type Users func(namespace, claim string) bool

// NewBinder reads claims, volumes and classes from the listers, and who
// uses a claim from users.
func NewBinder(claims corelisters.PersistentVolumeClaimLister, volumes corelisters.PersistentVolumeLister, classes storagelisters.StorageClassLister, users Users) *Binder {
	return &Binder{claims: claims, volumes: volumes, classes: classes, users: users,
		pvs: map[string]*assumption[*corev1.PersistentVolume]{}, pvcs: map[string]*assumption[*corev1.PersistentVolumeClaim]{}}
}

// current is the cached object, or what Assume made of it while the cache
// has not moved on.
func current[T metav1.Object](assumed map[string]*assumption[T], key string, cached T) T {
	a := assumed[key]
	if a == nil {
		return cached
	}
	if cached.GetResourceVersion() != a.base {
		delete(assumed, key)
		return cached
	}
	return a.obj
}

func (b *Binder) pv(name string) (*corev1.PersistentVolume, error) {
	pv, err := b.volumes.Get(name)
	if err != nil {
		delete(b.pvs, name)
		return nil, err
	}
	return current(b.pvs, name, pv), nil
}

func (b *Binder) pvc(ns, name string) (*corev1.PersistentVolumeClaim, error) {
	pvc, err := b.claims.PersistentVolumeClaims(ns).Get(name)
	if err != nil {
		delete(b.pvcs, ns+"/"+name)
		return nil, err
	}
	return current(b.pvcs, ns+"/"+name, pvc), nil
}

// pvsOfClass lists the volumes of a storage class as assumed.
func (b *Binder) pvsOfClass(class string) []*corev1.PersistentVolume {
	all, _ := b.volumes.List(labels.Everything())
	out := make([]*corev1.PersistentVolume, 0, len(all))
	for _, pv := range all {
		if volume.GetPersistentVolumeClass(pv) == class {
			out = append(out, current(b.pvs, pv.Name, pv))
		}
	}
	return out
}

// podClaims are a pod's claims sorted as VolumeBinding sorts them: bound,
// and unbound with delayed binding.
type podClaims struct {
	bound   []*corev1.PersistentVolumeClaim
	delayed []*corev1.PersistentVolumeClaim
}

// read is VolumeBinding's PreFilter: the pod's claims, or why no node can
// take the pod now ("" when some may).
func (b *Binder) read(v *Pod) (*podClaims, string) {
	owner := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: v.Namespace, Name: v.Name, UID: v.UID}}
	for _, c := range v.Claims {
		pvc, err := b.claims.PersistentVolumeClaims(v.Namespace).Get(c.Name)
		switch {
		case err != nil && c.Ephemeral && apierrors.IsNotFound(err):
			return nil, fmt.Sprintf("waiting for ephemeral volume controller to create the persistentvolumeclaim %q", c.Name)
		case err != nil:
			return nil, err.Error() // persistentvolumeclaim "x" not found
		case pvc.Status.Phase == corev1.ClaimLost:
			return nil, fmt.Sprintf("persistentvolumeclaim %q bound to non-existent persistentvolume %q", pvc.Name, pvc.Spec.VolumeName)
		case pvc.DeletionTimestamp != nil:
			return nil, fmt.Sprintf("persistentvolumeclaim %q is being deleted", pvc.Name)
		}
		if c.Ephemeral {
			if err := ephemeral.VolumeIsForPod(owner, pvc); err != nil {
				return nil, err.Error()
			}
		}
	}
	pc := &podClaims{}
	immediate := false
	for _, c := range v.Claims {
		pvc, err := b.pvc(v.Namespace, c.Name)
		if err != nil {
			return nil, err.Error()
		}
		if FullyBound(pvc) {
			pc.bound = append(pc.bound, pvc)
			continue
		}
		delayed, err := volume.IsDelayBindingMode(pvc, b.classes)
		if err != nil {
			return nil, err.Error()
		}
		if delayed && pvc.Spec.VolumeName == "" {
			pc.delayed = append(pc.delayed, pvc)
		} else {
			immediate = true // the PV controller binds it (a pre-bound claim too)
		}
	}
	if immediate {
		return nil, UnboundImmediate
	}
	return pc, ""
}

// FullyBound reports whether the PV controller finished binding a claim.
func FullyBound(pvc *corev1.PersistentVolumeClaim) bool {
	return pvc.Spec.VolumeName != "" && metav1.HasAnnotation(pvc.ObjectMeta, volume.AnnBindCompleted)
}

// PodRefusal is why no node can take the pod now, in kube-scheduler's words
// ("" when nodes decide).
func (b *Binder) PodRefusal(v *Pod) string {
	_, why := b.read(v)
	return why
}

// NodeRefusal is why node refuses the pod by its volumes: kube-scheduler's
// reasons for that node, or the pod's own refusal; nil when it admits it.
func (b *Binder) NodeRefusal(v *Pod, node *corev1.Node) []string {
	pc, why := b.read(v)
	if why != "" {
		return []string{why}
	}
	if b.readWriteOncePodInUse(v) {
		return []string{InUseReadWriteOncePod}
	}
	_, reasons := b.find(pc, node)
	return reasons
}

// readWriteOncePodInUse is VolumeRestrictions' check: a claim of the pod
// with the ReadWriteOncePod access mode that another pod uses.
func (b *Binder) readWriteOncePodInUse(v *Pod) bool {
	if b.users == nil {
		return false
	}
	for _, c := range v.Claims {
		if c.Ephemeral {
			continue // the pod's own claim
		}
		pvc, err := b.claims.PersistentVolumeClaims(v.Namespace).Get(c.Name)
		if err == nil && slices.Contains(pvc.Spec.AccessModes, corev1.ReadWriteOncePod) && b.users(v.Namespace, c.Name) {
			return true
		}
	}
	return false
}

// Uses reports whether the pod mounts claim name (of its namespace).
func (v *Pod) Uses(name string) bool {
	return slices.ContainsFunc(v.Claims, func(c Claim) bool { return c.Name == name })
}

// Binding is a volume chosen for an unbound claim.
type Binding struct {
	PV  *corev1.PersistentVolume // with its claimRef set to PVC
	PVC *corev1.PersistentVolumeClaim
	// write: the cached volume did not carry the claimRef yet.
	write bool
}

// Provision is an unbound claim to be provisioned on the node.
type Provision struct {
	PVC   *corev1.PersistentVolumeClaim // with the selected-node annotation
	write bool
}

// Plan is what binding a pod's volumes on a node takes.
type Plan struct {
	Node      string
	Static    []Binding
	Provision []Provision
	owner     string
	labels    map[string]string
	b         *Binder
}

// find is VolumeBinding's Filter for one node: the plan when the node
// admits the pod, else the reasons (in kube-scheduler's order).
func (b *Binder) find(pc *podClaims, node *corev1.Node) (*Plan, []string) {
	plan := &Plan{Node: node.Name, labels: node.Labels, b: b}
	boundOK, unboundOK, pvsFound := true, true, true
	for _, pvc := range pc.bound {
		pv, err := b.pv(pvc.Spec.VolumeName)
		if apierrors.IsNotFound(err) {
			pvsFound = false
			break
		}
		if err != nil {
			return nil, []string{err.Error()}
		}
		if volume.CheckNodeAffinity(pv, node.Labels) != nil {
			boundOK = false
			break
		}
	}
	if len(pc.delayed) > 0 {
		var ok bool
		var err error
		ok, err = b.findUnbound(pc.delayed, node, plan)
		if err != nil {
			return nil, []string{err.Error()}
		}
		unboundOK = ok
	}
	var reasons []string
	if !boundOK {
		reasons = append(reasons, NodeConflict)
	}
	if !unboundOK {
		reasons = append(reasons, BindConflict)
	}
	if !pvsFound {
		reasons = append(reasons, PVNotExist)
	}
	if len(reasons) > 0 {
		return nil, reasons
	}
	return plan, nil
}

// findUnbound matches the delayed claims on node (adding to plan): an
// available volume for each, smallest claims first, else provisioning.
func (b *Binder) findUnbound(claims []*corev1.PersistentVolumeClaim, node *corev1.Node, plan *Plan) (bool, error) {
	var match, provision []*corev1.PersistentVolumeClaim
	for _, pvc := range claims {
		if selected, ok := pvc.Annotations[volume.AnnSelectedNode]; ok {
			if selected != node.Name {
				return false, nil // provisioning was asked for on another node
			}
			provision = append(provision, pvc)
		} else {
			match = append(match, pvc)
		}
	}
	match = slices.Clone(match)
	slices.SortStableFunc(match, func(a, c *corev1.PersistentVolumeClaim) int {
		qa, qc := a.Spec.Resources.Requests[corev1.ResourceStorage], c.Spec.Resources.Requests[corev1.ResourceStorage]
		return qa.Cmp(qc)
	})
	chosen := map[string]*corev1.PersistentVolume{}
	byClass := map[string][]*corev1.PersistentVolume{}
	for _, pvc := range match {
		class := volume.GetPersistentVolumeClaimClass(pvc)
		pvs, ok := byClass[class]
		if !ok {
			pvs = b.pvsOfClass(class)
			byClass[class] = pvs
		}
		pv, err := volume.FindMatchingVolume(pvc, pvs, node, chosen, true, true)
		if err != nil {
			return false, err
		}
		if pv == nil {
			provision = append(provision, pvc)
			continue
		}
		chosen[pv.Name] = pv
		plan.Static = append(plan.Static, Binding{PV: pv, PVC: pvc})
	}
	for _, pvc := range provision {
		ok, err := b.canProvision(pvc, node)
		if err != nil || !ok {
			return false, err
		}
		plan.Provision = append(plan.Provision, Provision{PVC: pvc})
	}
	return true, nil
}

// canProvision: the claim's class has a provisioner that provisions on
// demand and its allowedTopologies admit the node.
func (b *Binder) canProvision(pvc *corev1.PersistentVolumeClaim, node *corev1.Node) (bool, error) {
	name := volume.GetPersistentVolumeClaimClass(pvc)
	if name == "" {
		return false, fmt.Errorf("no class for claim %q", pvc.Namespace+"/"+pvc.Name)
	}
	class, err := b.classes.Get(name)
	if err != nil {
		return false, fmt.Errorf("failed to find storage class %q", name)
	}
	if class.Provisioner == "" || class.Provisioner == volume.NotSupportedProvisioner {
		return false, nil
	}
	return allowedOn(class, node)
}

// allowedOn reads a class's allowedTopologies (each term: every label
// among the values listed) as the node selector they are.
func allowedOn(class *storagev1.StorageClass, node *corev1.Node) (bool, error) {
	if len(class.AllowedTopologies) == 0 {
		return true, nil
	}
	sel := &corev1.NodeSelector{}
	for _, t := range class.AllowedTopologies {
		term := corev1.NodeSelectorTerm{}
		for _, r := range t.MatchLabelExpressions {
			term.MatchExpressions = append(term.MatchExpressions, corev1.NodeSelectorRequirement{Key: r.Key, Operator: corev1.NodeSelectorOpIn, Values: r.Values})
		}
		sel.NodeSelectorTerms = append(sel.NodeSelectorTerms, term)
	}
	ns, err := nodeaffinity.NewNodeSelector(sel)
	if err != nil {
		return false, fmt.Errorf("storage class %q: allowedTopologies: %w", class.Name, err)
	}
	return ns.Match(node), nil
}

// Assume chooses the pod's volumes on node for owner (the pod's key) and
// records them, so no other pod is offered them: the plan (nil when every
// claim is bound already), or why the node no longer admits the pod (a
// volume assumed for another pod meanwhile).
func (b *Binder) Assume(owner string, v *Pod, node *corev1.Node) (*Plan, []string) {
	pc, why := b.read(v)
	if why != "" {
		return nil, []string{why}
	}
	if b.readWriteOncePodInUse(v) {
		return nil, []string{InUseReadWriteOncePod}
	}
	plan, reasons := b.find(pc, node)
	if len(reasons) > 0 {
		return nil, reasons
	}
	if len(plan.Static) == 0 && len(plan.Provision) == 0 {
		return nil, nil
	}
	plan.owner = owner
	for i := range plan.Static {
		s := &plan.Static[i]
		pv, dirty, err := volume.GetBindVolumeToClaim(s.PV, s.PVC)
		if err != nil {
			b.Forget(plan)
			return nil, []string{err.Error()}
		}
		s.PV, s.write = pv, dirty
		if dirty {
			b.pvs[pv.Name] = &assumption[*corev1.PersistentVolume]{obj: pv, base: pv.ResourceVersion, owner: owner}
		}
	}
	for i := range plan.Provision {
		p := &plan.Provision[i]
		if p.PVC.Annotations[volume.AnnSelectedNode] == node.Name {
			continue // asked for already (by this scheduler before a restart)
		}
		pvc := p.PVC.DeepCopy()
		metav1.SetMetaDataAnnotation(&pvc.ObjectMeta, volume.AnnSelectedNode, node.Name)
		p.PVC, p.write = pvc, true
		b.pvcs[pvc.Namespace+"/"+pvc.Name] = &assumption[*corev1.PersistentVolumeClaim]{obj: pvc, base: pvc.ResourceVersion, owner: owner}
	}
	return plan, nil
}

// Forget drops what Assume recorded for plan (its bind failed or was given
// up): the volumes are offered again as the cache shows them.
func (b *Binder) Forget(plan *Plan) {
	if plan == nil {
		return
	}
	for _, s := range plan.Static {
		if a := b.pvs[s.PV.Name]; a != nil && a.owner == plan.owner {
			delete(b.pvs, s.PV.Name)
		}
	}
	for _, p := range plan.Provision {
		key := p.PVC.Namespace + "/" + p.PVC.Name
		if a := b.pvcs[key]; a != nil && a.owner == plan.owner {
			delete(b.pvcs, key)
		}
	}
}

// Sweep drops assumptions whose owner keep no longer holds (gone, queued
// again); true when it dropped any.
func (b *Binder) Sweep(keep func(owner string) bool) bool {
	dropped := false
	for k, a := range b.pvs {
		if !keep(a.owner) {
			delete(b.pvs, k)
			dropped = true
		}
	}
	for k, a := range b.pvcs {
		if !keep(a.owner) {
			delete(b.pvcs, k)
			dropped = true
		}
	}
	return dropped
}

// Assumed counts the volumes and claims assumed and not yet seen written.
func (b *Binder) Assumed() int { return len(b.pvs) + len(b.pvcs) }

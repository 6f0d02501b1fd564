package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/hyperaccel/lpu-node/lab/churn"
	"github.com/hyperaccel/lpu-node/pkg/alloc"
	"github.com/hyperaccel/lpu-node/pkg/arcslice"
	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/nodelabel"
)

// namespace holds the pods, their claims and the claim templates.
const namespace = "default"

// simNode is one Node object and the LPUs the harness plays for it.
type simNode struct {
	name    string
	inv     *device.Inventory
	layout  *alloc.Layout
	builder *arcslice.Builder
	ctrl    slicePublisher // DRA: its pool's publisher, as lpu-dra's
	// labels keeps the node's prefilter labels in a prefilter arm (nil
	// otherwise), as lpu-dra's; labelled is what publish last Set, the
	// view of the slices last published.
	labels   *nodelabel.Keeper
	labelled arcslice.Free
}

// slicePublisher is what a node publishes its pool through: a
// resourceslice controller, as lpu-dra's kubelet plugin helper runs.
type slicePublisher interface {
	Update(*resourceslice.DriverResources)
	Stop()
	GetStats() resourceslice.Stats
}

var _ slicePublisher = (*resourceslice.Controller)(nil)

// publish hands the node's pool to its slice controller; in a prefilter
// arm it first Sets the node's labels from the same view, as lpu-dra's
// Publish does (a raised label lets the scheduler try the node, whose DRA
// filter then still decides).
func (n *simNode) publish(sl []resourceslice.Slice, free arcslice.Free) {
	if n.labels != nil {
		n.labels.Set(free.Labels())
		n.labelled = free
	}
	n.ctrl.Update(&resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{n.name: {Slices: sl}}})
}

// newSimNode builds a node of rings rings of 8 LPUs whose slices hold the
// arcs of sizes (empty: every arc), as lpu-dra with dra.arcSizes.
func newSimNode(name string, rings int, sizes []int) (*simNode, error) {
	inv := &device.Inventory{DriverVersion: "1.0.0"}
	for r := 0; r < rings; r++ {
		var ring []string
		for p := 0; p < 8; p++ {
			i := r*8 + p
			inv.Devices = append(inv.Devices, device.Device{ID: device.ID(i), Index: i, Path: "/dev/" + device.ID(i),
				Model: "LPU", Firmware: "1.0", NUMANode: r, Health: device.Health{Healthy: true}})
			ring = append(ring, device.ID(i))
		}
		inv.Rings = append(inv.Rings, ring)
	}
	b, err := arcslice.NewBuilder(inv, arcslice.Options{Sizes: sizes})
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", name, err)
	}
	return &simNode{name: name, inv: inv, layout: b.Layout(), builder: b}, nil
}

// armSpec is one way of serving LPUs.
type armSpec struct {
	name       string
	dra        bool
	dynamic    bool   // DRA: republish the order on every prepare/unprepare
	bestEffort bool   // DRA: the firstAvailable template (an arc, else singles)
	profile    string // scheduler profile
	strict     bool   // device plugin: refuse a scattered set at admission
	gang       string // gang arms (gang.go): "on" PodGroups, "off" the same pods without
	prefilter  bool   // DRA: node labels kept, the chart's prefilter policy installed (prefilter.go)
	proto      bool   // run by -proto-scheduler
}

// allArms are every arm, in run order (DRA first, then the device plugin).
var allArms = []armSpec{
	{name: "dra-static", dra: true, profile: profileDefault},
	{name: "dra-dynamic", dra: true, dynamic: true, profile: profileDefault},
	{name: "dra-best-effort", dra: true, dynamic: true, bestEffort: true, profile: profileDefault},
	{name: "dp-least", profile: profileDefault},
	{name: "dp-least-strict", profile: profileDefault, strict: true},
	{name: "dp-most", profile: profileMost},
	{name: "dp-most-strict", profile: profileMost, strict: true},
}

// sides are the node-side choices a device-plugin arm is scored under:
// pkg/alloc as lpu-device-plugin runs it, and (best-effort arms only) the
// kubelet's choice without a preferred allocation. The scheduler places by
// count, so both see the same placements and are scored in one run.
func (a armSpec) sides() []string {
	switch {
	case a.dra:
		return []string{"dra"}
	case a.strict:
		return []string{"pkg/alloc"}
	}
	return []string{"pkg/alloc", "kubelet-default"}
}

// podRec is one pod's life as the harness saw it. Its wait, created to
// started, is split into legs (waitLegs) at claimedAt and boundAt.
type podRec struct {
	job     int
	size    int
	burst   bool
	created time.Time
	// claimedAt is when the pod's status first named its claim (DRA: the
	// resourceclaim controller writes it once the claim exists; the
	// scheduler waits for it), else its bind; count pods: created.
	claimedAt time.Time
	boundAt   time.Time // when the pod was first seen bound to a node
	started   time.Time
	node      string
	ids       map[string][]string // by side
	contig    map[string]bool
	refused   bool
	gone      bool
}

// runner drives one arm.
type runner struct {
	cs    kubernetes.Interface
	spec  armSpec
	nodes map[string]*simNode
	unit  time.Duration
	logf  func(string, ...any)

	events chan event
	mu     sync.Mutex // guards pods for readers outside the loop
	pods   map[string]*podRec
	held   map[string]map[string]map[string]bool // side → node → LPU → held
	arcs   map[string]map[string][]alloc.Arc     // DRA: node → pod → arcs its claim was given
	rng    *rand.Rand
	errs   []string
	frozen map[string]podRec // the churn's records at its end
	atEnd  func()            // runs at the churn's end, before the pods go
	// lifetimes are the churn's job lifetimes in units, counted from start.
	lifetimes []float64
	// createJob, when set, makes the churn's job instead of create (gang
	// arms: a gang's PodGroup and pods); onStart, when set and true for a
	// started pod, takes over scheduling its departure (gang.go).
	createJob func(ctx context.Context, job, size int, burst bool) error
	onStart   func(ctx context.Context, p *corev1.Pod) bool
	frozenAt  time.Time // when the churn's records were frozen

	// reading are the DRA pods whose claim read is in flight (the loop's
	// own); reads bounds how many run at once.
	reading map[string]bool
	reads   chan struct{}

	// coalesce delays a node's republish after a change (-coalesce);
	// due are the nodes whose delayed republish is pending (the loop's
	// own).
	coalesce time.Duration
	due      map[string]bool

	// created counts the pods created, withAffinity those that admission
	// gave the prefilter's node affinity.
	created, withAffinity atomic.Int64

	pending atomic.Int64 // async API calls in flight
	wg      sync.WaitGroup

	// evicting makes the runner play the kubelet for pods deleted by
	// someone else (the scheduler's preemption): it frees their LPUs and
	// records them in evictions (guarded by mu). The priority workload
	// sets it.
	evicting  bool
	evictions []eviction
}

// eviction is a started pod deleted by someone other than the harness.
type eviction struct {
	name, node string
	at         time.Time
}

// claimReadWidth is how many claim reads run at once: a kubelet reads
// its own pods' claims, so at any scale they run side by side, bounded
// here so that a burst does not open a connection per pod.
const claimReadWidth = 32

// event is what the loop acts on: "claimed" (the pod's status names its
// claim), "bound" (the pod is on a node), "claim" (its claim read
// answered: claim or err), "depart" (its lifetime ended), "publish" (a
// node's coalesced republish is due), "call" (fn runs on the loop, the
// nodes' state holding still). at is when the pod was seen so.
type event struct {
	kind  string
	name  string
	pod   *corev1.Pod
	at    time.Time
	claim *resourcev1.ResourceClaim
	err   error
	fn    func()
}

func newRunner(cs kubernetes.Interface, spec armSpec, nodes []*simNode, unit time.Duration, seed uint64, logf func(string, ...any)) *runner {
	r := &runner{cs: cs, spec: spec, nodes: map[string]*simNode{}, unit: unit, logf: logf,
		events: make(chan event, 4096), pods: map[string]*podRec{}, held: map[string]map[string]map[string]bool{}, arcs: map[string]map[string][]alloc.Arc{},
		reading: map[string]bool{}, reads: make(chan struct{}, claimReadWidth), due: map[string]bool{},
		rng: rand.New(rand.NewPCG(seed, 0x6b756265))}
	for _, n := range nodes {
		r.nodes[n.name] = n
	}
	for _, s := range spec.sides() {
		r.held[s] = map[string]map[string]bool{}
		for _, n := range nodes {
			r.held[s][n.name] = map[string]bool{}
		}
	}
	return r
}

// podName names job i of the arm; burst pods are "b<i>".
func (r *runner) podName(i int, burst bool) string {
	p := "j"
	if burst {
		p = "b"
	}
	return r.spec.name + "-" + p + strconv.Itoa(i)
}

// pod is the arm's pod object for a job of size k.
func (a armSpec) pod(name string, size int) *corev1.Pod {
	zero := int64(0)
	no := false
	c := corev1.Container{Name: "main", Image: "lpu-job:bench"}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: map[string]string{"arm": a.name, "lpus": strconv.Itoa(size)}},
		Spec: corev1.PodSpec{SchedulerName: a.profile, TerminationGracePeriodSeconds: &zero,
			AutomountServiceAccountToken: &no, EnableServiceLinks: &no},
	}
	if a.dra {
		tmpl := templateName(size, a.bestEffort)
		p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "lpus", ResourceClaimTemplateName: &tmpl}}
		c.Resources.Claims = []corev1.ResourceClaim{{Name: "lpus"}}
	} else {
		q := *resource.NewQuantity(int64(size), resource.DecimalSI)
		c.Resources.Limits = corev1.ResourceList{LPUResource: q}
		c.Resources.Requests = corev1.ResourceList{LPUResource: q}
	}
	p.Spec.Containers = []corev1.Container{c}
	return p
}

// watch plays the kubelet's eyes: every pod of the arm bound to a node
// becomes an event for the loop, and so does a pod's status first naming
// its claim (the claim leg of its wait ends there).
func (r *runner) watch(ctx context.Context) error {
	f := informers.NewSharedInformerFactoryWithOptions(r.cs, 0, informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = "arm=" + r.spec.name }))
	inf := f.Core().V1().Pods().Informer()
	handle := func(old, obj any) {
		p, ok := obj.(*corev1.Pod)
		if ok && r.evicting && p.DeletionTimestamp != nil {
			r.events <- event{kind: "deleted", name: p.Name, at: time.Now()}
			return
		}
		if !ok || p.Status.Phase != corev1.PodPending || p.DeletionTimestamp != nil {
			return
		}
		now := time.Now()
		if p.Spec.NodeName != "" {
			r.events <- event{kind: "bound", name: p.Name, pod: p, at: now}
			return
		}
		if o, _ := old.(*corev1.Pod); claimName(p) != "" && (o == nil || claimName(o) == "") {
			r.events <- event{kind: "claimed", name: p.Name, at: now}
		}
	}
	funcs := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(n any) { handle(nil, n) },
		UpdateFunc: handle,
	}
	if r.evicting {
		funcs.DeleteFunc = func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if p, ok := obj.(*corev1.Pod); ok {
				r.events <- event{kind: "deleted", name: p.Name, at: time.Now()}
			}
		}
	}
	if _, err := inf.AddEventHandler(funcs); err != nil {
		return err
	}
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return fmt.Errorf("arm %s: pod informer did not sync", r.spec.name)
	}
	return nil
}

// loop owns the node states until ctx ends.
func (r *runner) loop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case ev := <-r.events:
			if ctx.Err() != nil {
				return // select picks at random: the end wins over a queued event
			}
			switch ev.kind {
			case "claimed":
				r.claimed(ev.name, ev.at)
			case "bound":
				r.bound(ctx, ev.pod, ev.at)
			case "claim":
				r.claimAnswered(ctx, ev)
			case "depart":
				r.depart(ctx, ev.name)
			case "deleted":
				r.evicted(ctx, ev.name, ev.at)
			case "publish":
				delete(r.due, ev.name)
				r.publish(r.nodes[ev.name])
			case "call":
				ev.fn()
			}
		}
	}
}

func (r *runner) record(name string) *podRec {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pods[name]
}

// claimed records when the pod's status first named its claim.
func (r *runner) claimed(name string, at time.Time) {
	rec := r.record(name)
	if rec == nil {
		return
	}
	r.mu.Lock()
	if rec.claimedAt.IsZero() {
		rec.claimedAt = at
	}
	r.mu.Unlock()
}

// bound is the kubelet's admission of a bound pod, seen bound at at: the
// device plugin picks LPUs with pkg/alloc (or as the kubelet does without
// a preferred allocation) and, strict, refuses a scattered set; DRA
// starts reading the claim's allocation off the loop, as each node's
// kubelet does on its own, and admits the pod when the read answers
// (claimAnswered).
func (r *runner) bound(ctx context.Context, p *corev1.Pod, at time.Time) {
	rec := r.record(p.Name)
	if rec == nil || !rec.started.IsZero() || rec.refused || rec.gone || r.reading[p.Name] {
		return
	}
	n := r.nodes[p.Spec.NodeName]
	if n == nil {
		r.errs = append(r.errs, fmt.Sprintf("pod %s bound to unknown node %s", p.Name, p.Spec.NodeName))
		return
	}
	r.mu.Lock()
	if rec.boundAt.IsZero() {
		rec.boundAt = at
	}
	if rec.claimedAt.IsZero() {
		// A count pod has no claim; a DRA pod whose claim was not seen
		// before its bind has the claim leg up to the bind.
		rec.claimedAt = rec.created
		if r.spec.dra {
			rec.claimedAt = rec.boundAt
		}
	}
	r.mu.Unlock()
	if !r.spec.dra {
		ids := map[string][]string{}
		for _, side := range r.spec.sides() {
			ids[side] = r.pick(side, n, rec.size)
		}
		r.admit(ctx, p, n, rec, ids, nil)
		return
	}
	name := claimName(p)
	if name == "" {
		r.errs = append(r.errs, fmt.Sprintf("bound pod %s has no claim in its status", p.Name))
		return
	}
	r.reading[p.Name] = true
	r.readClaim(ctx, p, name)
}

// readClaim gets the pod's claim off the loop, at most claimReadWidth at
// a time, and posts the answer to the loop as a "claim" event.
func (r *runner) readClaim(ctx context.Context, p *corev1.Pod, claim string) {
	r.async(func() {
		select {
		case r.reads <- struct{}{}:
		case <-ctx.Done():
			return
		}
		ev := event{kind: "claim", name: p.Name, pod: p}
		ev.claim, ev.err = r.cs.ResourceV1().ResourceClaims(namespace).Get(ctx, claim, metav1.GetOptions{})
		<-r.reads
		if ev.err != nil {
			ev.err = fmt.Errorf("pod %s: get claim %s: %w", p.Name, claim, ev.err)
		}
		select {
		case r.events <- ev:
		case <-ctx.Done():
		}
	})
}

// claimAnswered admits a DRA pod whose claim read answered. A pod that
// departed (was deleted) while its read was in flight holds nothing yet
// and is dropped; a failed read is a harness error, and the pod's next
// update reads again.
func (r *runner) claimAnswered(ctx context.Context, ev event) {
	delete(r.reading, ev.name)
	rec := r.record(ev.name)
	if rec == nil || !rec.started.IsZero() || rec.refused || rec.gone {
		return
	}
	if ev.err != nil {
		if ctx.Err() == nil {
			r.errs = append(r.errs, ev.err.Error())
		}
		return
	}
	n := r.nodes[ev.pod.Spec.NodeName]
	ids, arcs, err := claimIDs(ev.pod, n, ev.claim)
	if err != nil {
		r.errs = append(r.errs, err.Error())
		return
	}
	r.admit(ctx, ev.pod, n, rec, map[string][]string{"dra": ids}, arcs)
}

// admit starts the pod bound to n with the LPUs each side gave it (ids)
// and, DRA, its claim's arcs: it checks them, holds them, republishes
// (the dynamic arms, as lpu-dra does on Prepare), marks the pod running
// and schedules its departure; strict refuses a scattered set.
func (r *runner) admit(ctx context.Context, p *corev1.Pod, n *simNode, rec *podRec, ids map[string][]string, arcs []alloc.Arc) {
	contig := r.checkIDs(p, n, rec.size, ids)
	now := time.Now()
	if r.spec.strict && !contig["pkg/alloc"] {
		r.mu.Lock()
		rec.refused, rec.node = true, n.name
		r.mu.Unlock()
		r.async(func() { r.failAdmission(ctx, p) })
		return
	}
	for side, set := range ids {
		for _, id := range set {
			r.held[side][n.name][id] = true
		}
	}
	if len(arcs) > 0 {
		if r.arcs[n.name] == nil {
			r.arcs[n.name] = map[string][]alloc.Arc{}
		}
		r.arcs[n.name][p.Name] = arcs
	}
	r.mu.Lock()
	rec.started, rec.node, rec.ids, rec.contig = now, n.name, ids, contig
	r.mu.Unlock()
	r.republish(ctx, n)
	r.async(func() { r.markRunning(ctx, p, now) })
	if !rec.burst && (r.onStart == nil || !r.onStart(ctx, p)) {
		life := time.Duration(float64(r.unit) * r.lifetimes[rec.job])
		time.AfterFunc(life, func() {
			select {
			case r.events <- event{kind: "depart", name: p.Name}:
			case <-ctx.Done():
			}
		})
	}
}

// checkIDs records an error for every LPU given twice and every set of
// the wrong size or off n's rings, and returns whether each side's set is
// contiguous.
func (r *runner) checkIDs(p *corev1.Pod, n *simNode, size int, ids map[string][]string) map[string]bool {
	contig := map[string]bool{}
	for side, set := range ids {
		held := r.held[side][n.name]
		for _, id := range set {
			if held[id] {
				r.errs = append(r.errs, fmt.Sprintf("pod %s on %s got %s, already held (%s)", p.Name, n.name, id, side))
			}
		}
		pl, err := n.layout.Check(set)
		if err != nil || len(set) != size {
			r.errs = append(r.errs, fmt.Sprintf("pod %s on %s: %d LPUs %v for size %d (%v)", p.Name, n.name, len(set), set, size, err))
		}
		contig[side] = err == nil && pl.Contiguous
	}
	return contig
}

// claimName is the name of the pod's claim from its status ("" until
// the resourceclaim controller has made it).
func claimName(p *corev1.Pod) string {
	var name string
	for _, s := range p.Status.ResourceClaimStatuses {
		if s.ResourceClaimName != nil {
			name = *s.ResourceClaimName
		}
	}
	return name
}

// claimIDs returns the LPUs and arcs the scheduler allocated to claim,
// the claim of pod p bound to n.
func claimIDs(p *corev1.Pod, n *simNode, claim *resourcev1.ResourceClaim) ([]string, []alloc.Arc, error) {
	if claim.Status.Allocation == nil {
		return nil, nil, fmt.Errorf("pod %s bound with claim %s unallocated", p.Name, claim.Name)
	}
	var ids []string
	var arcs []alloc.Arc
	for _, res := range claim.Status.Allocation.Devices.Results {
		if res.Pool != n.name {
			return nil, nil, fmt.Errorf("pod %s on %s got %s from pool %s", p.Name, n.name, res.Device, res.Pool)
		}
		arc, err := arcslice.ParseDeviceName(res.Device)
		if err != nil {
			return nil, nil, fmt.Errorf("pod %s: %w", p.Name, err)
		}
		ids = append(ids, n.layout.ArcIDs(arc)...)
		arcs = append(arcs, arc)
	}
	return ids, arcs, nil
}

// pick is the device-plugin node side for a pod of size on n.
func (r *runner) pick(side string, n *simNode, size int) []string {
	held := r.held[side][n.name]
	var free []string
	for _, ring := range n.inv.Rings {
		for _, id := range ring {
			if !held[id] {
				free = append(free, id)
			}
		}
	}
	if size > len(free) {
		return nil
	}
	if side == "kubelet-default" {
		// The kubelet without a preferred allocation takes devices in no
		// useful order (it walks a map): a seeded shuffle.
		a := slices.Clone(free)
		for i := 0; i < size; i++ {
			j := i + r.rng.IntN(len(a)-i)
			a[i], a[j] = a[j], a[i]
		}
		return a[:size]
	}
	// lpu-device-plugin: GetPreferredAllocation answers Preferred, the
	// kubelet takes it, Allocate checks it (best-effort accepts all).
	return n.layout.Preferred(free, nil, size)
}

// republish is lpu-dra's republish after Prepare/Unprepare (dynamic
// arms): at once, or with -coalesce one window after the first change
// not yet published, taking every change within the window in one
// publication.
func (r *runner) republish(ctx context.Context, n *simNode) {
	switch {
	case !r.spec.dra || !r.spec.dynamic:
	case r.coalesce <= 0:
		r.publish(n)
	case !r.due[n.name]:
		r.due[n.name] = true
		time.AfterFunc(r.coalesce, func() {
			select {
			case r.events <- event{kind: "publish", name: n.name}:
			case <-ctx.Done():
			}
		})
	}
}

// publish publishes the node's free arcs and its pods' arcs in pkg/alloc
// order for the LPUs held now (arcslice.Builder.FreeSlices) and, a
// prefilter arm, first its labels from the same view (Builder.Free, raised
// to what each pod's claim holds: Free.Holding), as lpu-dra does.
func (r *runner) publish(n *simNode) {
	var held []string
	for id := range r.held["dra"][n.name] {
		held = append(held, id)
	}
	sort.Strings(held)
	var arcs []alloc.Arc
	free := n.builder.Free(held, nil)
	for _, a := range r.arcs[n.name] {
		arcs = append(arcs, a...)
		free = free.Holding(a) // never below what a pod's claim holds
	}
	n.publish(n.builder.FreeSlices(held, arcs, nil), free)
}

// depart ends a job: the pod is deleted (its claim goes with it) and the
// node frees its LPUs (lpu-dra's Unprepare republishes).
func (r *runner) depart(ctx context.Context, name string) {
	rec := r.record(name)
	if rec == nil || rec.gone {
		return
	}
	r.mu.Lock()
	rec.gone = true
	r.mu.Unlock()
	r.release(ctx, name, rec)
	r.async(func() { r.deletePod(ctx, name) })
}

// release frees what the pod holds on its node (lpu-dra's Unprepare
// republishes).
func (r *runner) release(ctx context.Context, name string, rec *podRec) {
	if rec.node == "" || rec.refused {
		return
	}
	for side, set := range rec.ids {
		for _, id := range set {
			delete(r.held[side][rec.node], id)
		}
	}
	delete(r.arcs[rec.node], name)
	r.republish(ctx, r.nodes[rec.node])
}

// evicted is the kubelet seeing a pod it runs deleted by someone else
// (the scheduler's preemption), at at: the pod stops, its LPUs are free,
// and its object goes (the kubelet's final delete; an immediate delete
// has already removed it). A started pod is recorded as an eviction.
func (r *runner) evicted(ctx context.Context, name string, at time.Time) {
	rec := r.record(name)
	if rec == nil || rec.gone || rec.refused {
		return
	}
	r.mu.Lock()
	rec.gone = true
	if !rec.started.IsZero() {
		r.evictions = append(r.evictions, eviction{name: name, node: rec.node, at: at})
	}
	r.mu.Unlock()
	r.release(ctx, name, rec)
	r.async(func() { r.deletePod(ctx, name) })
}

func (r *runner) async(fn func()) {
	r.pending.Add(1)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer r.pending.Add(-1)
		fn()
	}()
}

func (r *runner) markRunning(ctx context.Context, p *corev1.Pod, at time.Time) {
	p = p.DeepCopy()
	t := metav1.NewTime(at)
	p.Status.Phase, p.Status.StartTime = corev1.PodRunning, &t
	p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: t})
	if _, err := r.cs.CoreV1().Pods(namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) && ctx.Err() == nil {
		r.logf("mark %s running: %v", p.Name, err)
	}
}

// failAdmission is what the kubelet does when Allocate refuses: the pod
// fails with UnexpectedAdmissionError, and is then removed.
func (r *runner) failAdmission(ctx context.Context, p *corev1.Pod) {
	p = p.DeepCopy()
	p.Status.Phase, p.Status.Reason = corev1.PodFailed, "UnexpectedAdmissionError"
	p.Status.Message = "Allocate failed due to lpu-device-plugin: strict policy: LPUs are not ring-contiguous"
	if _, err := r.cs.CoreV1().Pods(namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil && ctx.Err() == nil {
		r.logf("fail admission of %s: %v", p.Name, err)
	}
	r.deletePod(ctx, p.Name)
}

func (r *runner) deletePod(ctx context.Context, name string) {
	zero := int64(0)
	if err := r.cs.CoreV1().Pods(namespace).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil {
		r.logf("delete %s: %v", name, err)
	}
}

// create makes a job's pod, recording it first so that the bind event
// finds it.
func (r *runner) create(ctx context.Context, job int, size int, burst bool) error {
	name := r.podName(job, burst)
	r.mu.Lock()
	r.pods[name] = &podRec{job: job, size: size, burst: burst, created: time.Now()}
	r.mu.Unlock()
	p := r.spec.pod(name, size)
	return r.createPod(ctx, p)
}

// createPod creates p, counting it and whether admission gave it the
// prefilter's node affinity.
func (r *runner) createPod(ctx context.Context, p *corev1.Pod) error {
	got, err := r.cs.CoreV1().Pods(namespace).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		return refused("pod "+p.Name, p, err)
	}
	r.created.Add(1)
	if hasPrefilterAffinity(got) {
		r.withAffinity.Add(1)
	}
	return nil
}

// burst creates jobs [0,n) at once and measures how fast the scheduler
// places them (its own scheduled-attempts counter), then deletes them and
// waits for the cluster to be empty again.
func (r *runner) burst(ctx context.Context, jobs []churn.Job, n int, sc *scraper) (throughput float64, err error) {
	before, err := sc.scrape(ctx)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	if err := parallel(ctx, n, 8, func(i int) error { return r.create(ctx, i, jobs[i].Size, true) }); err != nil {
		return 0, err
	}
	deadline := time.Now().Add(3 * time.Minute)
	last, lastAt := before.scheduled, start
	for time.Now().Before(deadline) {
		m, err := sc.scrape(ctx)
		if err != nil {
			return 0, err
		}
		if m.scheduled != last {
			last, lastAt = m.scheduled, time.Now()
		}
		if m.scheduled-before.scheduled >= float64(n) {
			break
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	got := last - before.scheduled
	if got < float64(n) {
		r.logf("arm %s: burst: only %.0f of %d pods scheduled within 3 min", r.spec.name, got, n)
	}
	throughput = got / lastAt.Sub(start).Seconds()
	for i := 0; i < n; i++ {
		r.events <- event{kind: "depart", name: r.podName(i, true)}
	}
	return throughput, r.drain(ctx)
}

// resweep is how often drain deletes again the arm's pods that are still
// there and not being deleted: a delete that timed out on an overloaded
// apiserver is not retried where it was made, and one such pod lost a
// whole 1,000-node run.
var resweep = 30 * time.Second

// drain waits until the arm's pods and every claim are gone. The deadline
// grows with what is left: at 1,000 nodes an overloaded apiserver deletes
// ~2,000 DRA pods and claims in more than 3 min, and a drain that gives up
// loses the whole run.
func (r *runner) drain(ctx context.Context) error {
	pods, err := r.cs.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: "arm=" + r.spec.name})
	if err != nil {
		return fmt.Errorf("list pods: %w", err)
	}
	allow := drainAllowance(len(pods.Items))
	deadline := time.Now().Add(allow)
	swept := time.Now()
	for {
		pods, err := r.cs.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: "arm=" + r.spec.name})
		if err != nil {
			return fmt.Errorf("list pods: %w", err)
		}
		claims, err := r.cs.ResourceV1().ResourceClaims(namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return fmt.Errorf("list claims: %w", err)
		}
		if len(pods.Items) == 0 && len(claims.Items) == 0 && r.pending.Load() == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("arm %s: %d pods and %d claims left after %v", r.spec.name, len(pods.Items), len(claims.Items), allow)
		}
		if time.Since(swept) >= resweep && r.pending.Load() == 0 {
			swept = time.Now()
			for _, p := range pods.Items {
				if p.DeletionTimestamp == nil {
					r.deletePod(ctx, p.Name)
				}
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// churnPhase replays the jobs in real time (one time unit = r.unit) and
// ends one unit after the last arrival; what runs then is deleted.
func (r *runner) churnPhase(ctx context.Context, jobs []churn.Job) (time.Duration, error) {
	start := time.Now()
	errc := make(chan error, 1)
	sem := make(chan struct{}, 16)
	for i, j := range jobs {
		at := start.Add(time.Duration(j.Arrive * float64(r.unit)))
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case err := <-errc:
			return 0, err
		case <-time.After(time.Until(at)):
		}
		sem <- struct{}{}
		create := r.create
		if r.createJob != nil {
			create = r.createJob
		}
		go func(i, size int) {
			defer func() { <-sem }()
			if err := create(ctx, i, size, false); err != nil {
				select {
				case errc <- err:
				default:
				}
			}
		}(i, j.Size)
	}
	end := start.Add(time.Duration((jobs[len(jobs)-1].Arrive + 1) * float64(r.unit)))
	select {
	case <-ctx.Done():
		return 0, ctx.Err()
	case err := <-errc:
		return 0, err
	case <-time.After(time.Until(end)):
	}
	took := time.Since(start)
	r.mu.Lock()
	var names []string
	for name, rec := range r.pods {
		if !rec.burst {
			names = append(names, name)
		}
	}
	r.mu.Unlock()
	// Freeze the records: nothing starts after the end.
	r.mu.Lock()
	ended := map[string]podRec{}
	for _, name := range names {
		ended[name] = *r.pods[name]
	}
	r.frozen, r.frozenAt = ended, time.Now()
	r.mu.Unlock()
	if r.atEnd != nil {
		r.atEnd()
	}
	for _, name := range names {
		r.events <- event{kind: "depart", name: name}
	}
	return took, r.drain(ctx)
}

// drainAllowance is 3 min plus 0.2 s for each pod left to delete.
func drainAllowance(pods int) time.Duration {
	return 3*time.Minute + time.Duration(pods)*200*time.Millisecond
}

// parallel runs fn(0..n-1) on width goroutines; the first error wins.
func parallel(ctx context.Context, n, width int, fn func(i int) error) error {
	var (
		wg   sync.WaitGroup
		once sync.Once
		ferr error
		next atomic.Int64
	)
	for w := 0; w < width; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := fn(i); err != nil {
					once.Do(func() { ferr = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	return ferr
}

// paused runs fn on the loop, which takes no other event until fn
// returns: the nodes' state (held LPUs, what was published) holds still
// for fn.
func (r *runner) paused(ctx context.Context, fn func()) error {
	done := make(chan struct{})
	select {
	case r.events <- event{kind: "call", fn: func() { fn(); close(done) }}:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

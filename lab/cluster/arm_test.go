package main

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	resourceclient "k8s.io/client-go/kubernetes/typed/resource/v1"
	k8stesting "k8s.io/client-go/testing"

	"github.com/hyperaccel/lpu-node/pkg/alloc"
	"github.com/hyperaccel/lpu-node/pkg/arcslice"
)

// loopRig is a runner on a fake API server with one one-ring node, its
// loop running on an unbuffered event channel: a send returns once the
// loop took the event, that is once it finished the one before.
type loopRig struct {
	t      *testing.T
	r      *runner
	cs     *fake.Clientset
	node   *simNode
	cancel context.CancelFunc
	// getClaim, when set, runs before each claim GET, outside the fake's
	// lock (a reactor holds it: one hanging there hangs every call).
	getClaim func(name string)
}

// claimHook is the fake client set with loopRig.getClaim before claim GETs.
type claimHook struct {
	*fake.Clientset
	g *loopRig
}

func (c claimHook) ResourceV1() resourceclient.ResourceV1Interface {
	return hookedResource{c.Clientset.ResourceV1(), c.g}
}

type hookedResource struct {
	resourceclient.ResourceV1Interface
	g *loopRig
}

func (h hookedResource) ResourceClaims(ns string) resourceclient.ResourceClaimInterface {
	return hookedClaims{h.ResourceV1Interface.ResourceClaims(ns), h.g}
}

type hookedClaims struct {
	resourceclient.ResourceClaimInterface
	g *loopRig
}

func (h hookedClaims) Get(ctx context.Context, name string, o metav1.GetOptions) (*resourcev1.ResourceClaim, error) {
	if h.g.getClaim != nil {
		h.g.getClaim(name)
	}
	return h.ResourceClaimInterface.Get(ctx, name, o)
}

var _ kubernetes.Interface = claimHook{}

// newLoopRig starts the loop; set getClaim before the first event.
func newLoopRig(t *testing.T, spec armSpec, objs ...runtime.Object) *loopRig {
	t.Helper()
	n, err := newSimNode("node-0000", 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs := fake.NewClientset(objs...)
	g := &loopRig{t: t, cs: cs, node: n}
	r := newRunner(claimHook{cs, g}, spec, []*simNode{n}, time.Hour, 1, t.Logf)
	r.events = make(chan event)
	r.lifetimes = []float64{1, 1, 1}
	ctx, cancel := context.WithCancel(context.Background())
	g.r, g.cancel = r, cancel
	done := make(chan struct{})
	go func() { r.loop(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return g
}

// send hands the loop ev and waits until it has acted on it.
func (g *loopRig) send(ev event) {
	g.r.events <- ev
	g.r.events <- event{kind: "sync"} // no such kind: taken once ev is done
}

// settle waits until no API call of the runner is in flight and the loop
// has acted on every answer (a claim read posts its answer, then stops
// counting as pending).
func (g *loopRig) settle() {
	g.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		for g.r.pending.Load() != 0 {
			if time.Now().After(deadline) {
				g.t.Fatalf("%d API calls still in flight", g.r.pending.Load())
			}
			time.Sleep(5 * time.Millisecond)
		}
		g.send(event{kind: "sync"})
		if g.r.pending.Load() == 0 {
			return
		}
	}
}

// add records job i's pod as created now, as runner.create does.
func (g *loopRig) add(name string, job, size int) *podRec {
	rec := &podRec{job: job, size: size, created: time.Now()}
	g.r.mu.Lock()
	g.r.pods[name] = rec
	g.r.mu.Unlock()
	return rec
}

// snapshot is rec as the loop left it.
func (g *loopRig) snapshot(name string) podRec {
	g.r.mu.Lock()
	defer g.r.mu.Unlock()
	return *g.r.pods[name]
}

// boundPod is pod name on node-0000 with its claim in its status.
func boundPod(name string) *corev1.Pod {
	claim := name + "-lpus"
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: corev1.PodSpec{NodeName: "node-0000"},
		Status: corev1.PodStatus{Phase: corev1.PodPending,
			ResourceClaimStatuses: []corev1.PodResourceClaimStatus{{Name: "lpus", ResourceClaimName: &claim}}}}
}

// allocated is pod name's claim, given arc on node-0000.
func allocated(name string, arc alloc.Arc) *resourcev1.ResourceClaim {
	return &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name + "-lpus", Namespace: namespace},
		Status: resourcev1.ResourceClaimStatus{Allocation: &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{
			Results: []resourcev1.DeviceRequestAllocationResult{{Request: "lpus", Driver: "lpu.hyperaccel.ai", Pool: "node-0000", Device: arcslice.DeviceName(arc)}}}}}}
}

// heldIDs are the LPUs the loop holds on node-0000 (DRA), sorted.
func (g *loopRig) heldIDs() []string {
	var out []string
	for id := range g.r.held["dra"]["node-0000"] {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// The claim read runs off the loop: while one pod's read hangs, another
// pod is admitted; the first departs (is deleted) before its read
// answers, and the late answer then starts nothing and holds nothing.
func TestClaimReadAsync(t *testing.T) {
	a, b := alloc.Arc{Ring: 0, Start: 0, Size: 4}, alloc.Arc{Ring: 0, Start: 4, Size: 4}
	g := newLoopRig(t, armSpec{name: "t", dra: true, profile: profileDefault},
		boundPod("t-j0"), boundPod("t-j1"), allocated("t-j0", a), allocated("t-j1", b))
	inflight, release := make(chan struct{}, 1), make(chan struct{})
	var reads0 atomic.Int32
	g.getClaim = func(name string) {
		if name == "t-j0-lpus" {
			reads0.Add(1)
			inflight <- struct{}{}
			<-release
		}
	}
	g.add("t-j0", 0, 4)
	g.add("t-j1", 1, 4)

	claimedAt := time.Now()
	g.send(event{kind: "claimed", name: "t-j0", at: claimedAt})
	boundAt := time.Now()
	g.send(event{kind: "bound", name: "t-j0", pod: boundPod("t-j0"), at: boundAt})
	select {
	case <-inflight:
	case <-time.After(10 * time.Second):
		t.Fatal("t-j0's claim was never read")
	}
	// t-j1 is admitted while t-j0's read hangs.
	g.send(event{kind: "bound", name: "t-j1", pod: boundPod("t-j1"), at: time.Now()})
	deadline := time.Now().Add(10 * time.Second)
	for g.snapshot("t-j1").started.IsZero() {
		if time.Now().After(deadline) {
			t.Fatal("t-j1 did not start while t-j0's claim read was in flight: the read blocks the loop")
		}
		g.send(event{kind: "sync"})
		time.Sleep(10 * time.Millisecond)
	}
	// Another update of t-j0 while its read is in flight reads nothing more.
	g.send(event{kind: "bound", name: "t-j0", pod: boundPod("t-j0"), at: time.Now()})
	// t-j0 departs before its read answers.
	g.send(event{kind: "depart", name: "t-j0"})
	if rec := g.snapshot("t-j0"); !rec.gone || !rec.claimedAt.Equal(claimedAt) || !rec.boundAt.Equal(boundAt) {
		t.Fatalf("t-j0 after its depart: %+v", rec)
	}
	close(release)
	g.settle() // the read answered, the deletes are done

	if n := reads0.Load(); n != 1 {
		t.Errorf("t-j0's claim read %d times, want once", n)
	}
	if rec := g.snapshot("t-j0"); !rec.started.IsZero() || rec.node != "" || rec.ids != nil {
		t.Errorf("t-j0, deleted while its read was in flight, was started: %+v", rec)
	}
	if rec := g.snapshot("t-j1"); rec.node != "node-0000" || !slices.Equal(rec.ids["dra"], g.node.layout.ArcIDs(b)) || !rec.contig["dra"] {
		t.Errorf("t-j1: %+v", rec)
	}
	if got, want := g.heldIDs(), slices.Sorted(slices.Values(g.node.layout.ArcIDs(b))); !slices.Equal(got, want) {
		t.Errorf("held %v, want t-j1's %v only", got, want)
	}
	if _, ok := g.r.arcs["node-0000"]["t-j0"]; ok || len(g.r.arcs["node-0000"]["t-j1"]) != 1 {
		t.Errorf("arcs %v, want t-j1's only", g.r.arcs)
	}
	if len(g.r.reading) != 0 || len(g.r.errs) != 0 {
		t.Errorf("reads in flight %v, errors %v", g.r.reading, g.r.errs)
	}
	if _, err := g.cs.CoreV1().Pods(namespace).Get(context.Background(), "t-j0", metav1.GetOptions{}); err == nil {
		t.Error("t-j0 not deleted")
	}
	if p, err := g.cs.CoreV1().Pods(namespace).Get(context.Background(), "t-j1", metav1.GetOptions{}); err != nil || p.Status.Phase != corev1.PodRunning {
		t.Errorf("t-j1 not marked running: %v %v", p.Status.Phase, err)
	}
}

// A failed claim read is a harness error; the pod's next update reads
// again and admits it.
func TestClaimReadError(t *testing.T) {
	arc := alloc.Arc{Ring: 0, Start: 0, Size: 8}
	g := newLoopRig(t, armSpec{name: "t", dra: true, profile: profileDefault}, boundPod("t-j0"), allocated("t-j0", arc))
	var fail atomic.Bool
	fail.Store(true)
	g.cs.PrependReactor("get", "resourceclaims", func(k8stesting.Action) (bool, runtime.Object, error) {
		if fail.Load() {
			return true, nil, errors.New("etcdserver: request timed out")
		}
		return false, nil, nil
	})
	g.add("t-j0", 0, 8)
	g.send(event{kind: "bound", name: "t-j0", pod: boundPod("t-j0"), at: time.Now()})
	g.settle()
	if len(g.r.errs) != 1 || !strings.Contains(g.r.errs[0], "get claim t-j0-lpus") || !strings.Contains(g.r.errs[0], "timed out") {
		t.Fatalf("errors %v, want the failed read", g.r.errs)
	}
	if rec := g.snapshot("t-j0"); !rec.started.IsZero() || len(g.r.reading) != 0 {
		t.Fatalf("after a failed read: %+v, in flight %v", rec, g.r.reading)
	}
	fail.Store(false)
	g.send(event{kind: "bound", name: "t-j0", pod: boundPod("t-j0"), at: time.Now()})
	g.settle()
	rec := g.snapshot("t-j0")
	if rec.started.IsZero() || len(g.heldIDs()) != 8 {
		t.Fatalf("the second read did not admit the pod: %+v, held %v", rec, g.heldIDs())
	}
	// No claimed event was seen: the claim leg runs to the bind.
	if l := legsOf(rec); !rec.claimedAt.Equal(rec.boundAt) || l.Bind != 0 || math.Abs(l.Claim+l.Admit-l.Total) > 1e-9 {
		t.Errorf("legs %+v of %+v", l, rec)
	}
}

// A count pod is admitted on the loop (no read), with no claim leg.
func TestCountPodLegs(t *testing.T) {
	g := newLoopRig(t, armSpec{name: "t", profile: profileDefault})
	created := g.add("t-j0", 0, 4).created
	p := boundPod("t-j0")
	p.Status.ResourceClaimStatuses = nil
	boundAt := time.Now()
	g.send(event{kind: "bound", name: "t-j0", pod: p, at: boundAt})
	rec := g.snapshot("t-j0")
	if rec.started.IsZero() || !rec.claimedAt.Equal(created) || !rec.boundAt.Equal(boundAt) || len(rec.ids["pkg/alloc"]) != 4 {
		t.Fatalf("count pod: %+v", rec)
	}
	if l := legsOf(rec); l.Claim != 0 || l.Bind <= 0 || l.Admit < 0 {
		t.Errorf("count pod's legs %+v", l)
	}
}

// The pod informer posts "claimed" once, when a pending pod's status
// first names its claim, and "bound" once it is on a node.
func TestWatchClaimedThenBound(t *testing.T) {
	cs := fake.NewClientset()
	r := newRunner(cs, armSpec{name: "t", dra: true, profile: profileDefault}, nil, time.Hour, 1, t.Logf)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := r.watch(ctx); err != nil {
		t.Fatal(err)
	}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "t-j0", Namespace: namespace, Labels: map[string]string{"arm": "t"}},
		Status: corev1.PodStatus{Phase: corev1.PodPending}}
	p, err := cs.CoreV1().Pods(namespace).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	next := func() event {
		t.Helper()
		select {
		case ev := <-r.events:
			return ev
		case <-time.After(10 * time.Second):
			t.Fatal("no event")
		}
		return event{}
	}
	claim := "t-j0-lpus"
	p.Status.ResourceClaimStatuses = []corev1.PodResourceClaimStatus{{Name: "lpus", ResourceClaimName: &claim}}
	before := time.Now()
	if p, err = cs.CoreV1().Pods(namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if ev := next(); ev.kind != "claimed" || ev.name != "t-j0" || ev.at.Before(before) {
		t.Fatalf("first event %+v, want claimed", ev)
	}
	p.Labels["x"] = "y" // an update that changes nothing of interest
	if p, err = cs.CoreV1().Pods(namespace).Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	p.Spec.NodeName = "node-0000"
	if _, err = cs.CoreV1().Pods(namespace).Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if ev := next(); ev.kind != "bound" || ev.pod.Spec.NodeName != "node-0000" {
		t.Fatalf("second event %+v, want bound (no second claimed)", ev)
	}
}

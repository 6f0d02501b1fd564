package publish

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/hyperaccel/lpu-node/internal/health/healthtest"
	"github.com/hyperaccel/lpu-node/pkg/arcslice"
	"github.com/hyperaccel/lpu-node/pkg/device"
)

// cordonSet is a Cordon source the test sets, as cordon.Watcher does on
// an annotation change.
type cordonSet struct {
	mu      sync.Mutex
	ids     map[string]bool
	unread  bool // Known is false
	changed chan struct{}
}

func (c *cordonSet) Known() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.unread
}

func newCordonSet() *cordonSet { return &cordonSet{changed: make(chan struct{})} }

func (c *cordonSet) Snapshot() (map[string]bool, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ids, c.changed
}

func (c *cordonSet) set(ids ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ids, c.unread = map[string]bool{}, false
	for _, id := range ids {
		c.ids[id] = true
	}
	close(c.changed)
	c.changed = make(chan struct{})
}

// taintsOf returns key=value:effect of each of d's taints.
func taintsOf(d resourceapi.Device) []string {
	var out []string
	for _, t := range d.Taints {
		out = append(out, t.Key+"="+t.Value+":"+string(t.Effect))
	}
	return out
}

// Every arc holding the cordoned lpu2 carries the cordon taint naming it,
// and no other arc does; an arc holding the unhealthy lpu5 keeps its
// unhealthy taint, beside the cordon one when it holds both; so do the
// LPUs' count devices. Within each size (and among the count devices) the
// cordoned ones come after every untainted one, so the allocator's first
// fit never lands on one.
func TestCordonTaintsTheArcsHoldingTheLPU(t *testing.T) {
	inv := healthtest.Ring(8)
	inv.Devices[5].Health = device.Health{Reason: "status ECC_ERROR"}
	c := newCordonSet()
	c.set("lpu2")
	e := &env{t: t, stateDir: t.TempDir(), cdiDir: filepath.Join(t.TempDir(), "cdi"), devices: healthtest.New(t, inv), cordoned: c}
	e.restart()
	res, err := e.p.Resources()
	if err != nil {
		t.Fatal(err)
	}
	cordoned, both := 0, 0
	taintedSeen := map[int64]bool{} // by size (count devices: 0): a tainted device was seen
	for _, s := range res.Pools[node].Slices {
		for _, d := range s.Devices {
			lpus := strings.Split(*d.Attributes["lpus"].StringValue, ",")
			var want []string
			if slices.Contains(lpus, "lpu5") {
				want = append(want, arcslice.TaintKey+"=lpu5:NoSchedule")
			}
			if slices.Contains(lpus, "lpu2") {
				want = append(want, arcslice.CordonTaintKey+"=lpu2:NoSchedule")
				cordoned++
			}
			if len(want) == 2 {
				both++
			}
			if got := taintsOf(d); !slices.Equal(got, want) {
				t.Errorf("%s (lpus %v): taints %v, want %v", d.Name, lpus, got, want)
			}
			size := *d.Attributes["size"].IntValue
			if arcslice.IsCountDevice(d.Name) {
				size = 0
			}
			if len(want) > 0 {
				taintedSeen[size] = true
			} else if taintedSeen[size] {
				t.Errorf("%s is untainted but comes after a tainted arc of size %d", d.Name, size)
			}
		}
	}
	// On a ring of 8: k arcs of each size k < 8 hold lpu2, plus the ring,
	// plus lpu2's count device.
	if cordoned != 1+2+3+4+5+6+7+1+1 || both == 0 {
		t.Fatalf("%d devices carry the cordon taint (%d with both), want 30 with some both", cordoned, both)
	}
}

// The node labels count cordoned LPUs as taken: cordoning lpu2 and lpu6
// on an empty ring of 8 leaves runs of 3 (largest published arc 2) and 6
// free LPUs (published floor 4); uncordoning gives 8 and 8 back.
func TestCordonLowersTheNodeLabels(t *testing.T) {
	rec := &lastLabels{}
	c := newCordonSet()
	e := &env{t: t, stateDir: t.TempDir(), cdiDir: filepath.Join(t.TempDir(), "cdi"), devices: healthtest.New(t, healthtest.Ring(8)),
		arcSizes: []int{1, 2, 4, 8}, labels: rec, cordoned: c}
	e.restart()
	for _, step := range []struct {
		cordon    []string
		arc, lpus string
	}{{nil, "8", "8"}, {[]string{"lpu2", "lpu6"}, "2", "4"}, {nil, "8", "8"}} {
		c.set(step.cordon...)
		if err := e.p.Publish(context.Background(), &sink{}); err != nil {
			t.Fatal(err)
		}
		if rec.got[arcslice.LabelLargestFreeArc] != step.arc || rec.got[arcslice.LabelFreeLPUs] != step.lpus {
			t.Fatalf("cordoned %v: labels %v, want largest-free-arc %s, free-lpus %s", step.cordon, rec.got, step.arc, step.lpus)
		}
	}
}

// Until the source has read the Node, every arc is published with the
// cordon taint and the labels say nothing is free: a restart never offers
// an LPU that was cordoned before it.
func TestCordonUnknownFailsClosed(t *testing.T) {
	rec := &lastLabels{}
	c := &cordonSet{unread: true, changed: make(chan struct{})}
	e := &env{t: t, stateDir: t.TempDir(), cdiDir: filepath.Join(t.TempDir(), "cdi"), devices: healthtest.New(t, healthtest.Ring(8)),
		arcSizes: []int{1, 2, 4, 8}, labels: rec, cordoned: c}
	e.restart()
	sink := &lastSink{}
	if err := e.p.Publish(context.Background(), sink); err != nil {
		t.Fatal(err)
	}
	if taints, _ := sink.cordonTaints(); taints != 8+8+8+1+8 {
		t.Fatalf("source not read: %d devices carry the cordon taint, want all 25 arcs and 8 count devices", taints)
	}
	if rec.got[arcslice.LabelLargestFreeArc] != "0" || rec.got[arcslice.LabelFreeLPUs] != "0" {
		t.Fatalf("source not read: labels %v, want 0 and 0", rec.got)
	}
	c.set()
	if err := e.p.Publish(context.Background(), sink); err != nil {
		t.Fatal(err)
	}
	if taints, _ := sink.cordonTaints(); taints != 0 {
		t.Fatalf("source read, nothing cordoned: %d cordon taints", taints)
	}
}

// cordonTaints counts the cordon taints of the last publication.
func (s *lastSink) cordonTaints() (int, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, sl := range s.last.Pools[node].Slices {
		for _, d := range sl.Devices {
			for _, t := range d.Taints {
				if t.Key == arcslice.CordonTaintKey {
					n++
				}
			}
		}
	}
	return n, s.n
}

// Run republishes when the cordoned set changes, with nothing else
// changing: a cordon and an uncordon each reach the pool.
func TestRunRepublishesWhenTheCordonChanges(t *testing.T) {
	c := newCordonSet()
	e := &env{t: t, stateDir: t.TempDir(), cdiDir: filepath.Join(t.TempDir(), "cdi"), devices: healthtest.New(t, healthtest.Ring(8)),
		arcSizes: []int{1, 2, 4, 8}, cordoned: c}
	e.restart()
	ctx, cancel := context.WithCancel(context.Background())
	rec := &lastSink{}
	done := make(chan error, 1)
	go func() { done <- e.p.Run(ctx, rec) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	await := func(what string, ok func(taints, n int) bool) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			taints, n := rec.cordonTaints()
			if ok(taints, n) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: after 30 s, %d publications with %d cordon taints", what, n, taints)
			}
		}
	}
	await("first publication", func(taints, n int) bool { return n >= 1 && taints == 0 })
	c.set("lpu3")
	// Sizes 1, 2, 4 and 8 on a ring of 8: 1+2+4+1 arcs hold lpu3, and
	// its count device.
	await("cordon lpu3", func(taints, _ int) bool { return taints == 9 })
	c.set()
	await("uncordon", func(taints, _ int) bool { return taints == 0 })
}

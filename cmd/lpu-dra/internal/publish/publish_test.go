package publish

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hyperaccel/lpu-node/internal/health/healthtest"
	"github.com/hyperaccel/lpu-node/pkg/alloc"
	"github.com/hyperaccel/lpu-node/pkg/arcslice"
	"github.com/hyperaccel/lpu-node/pkg/device"
)

// The pool holds the free arcs and the arcs of prepared claims, across a
// restart (the checkpoint names the devices); an Unprepare brings the
// rest back.
func TestPublishesFreeAndPreparedArcs(t *testing.T) {
	e := newEnv(t, healthtest.New(t, healthtest.Ring(8)))
	if got := len(publishedArcs(t, e)); got != 57 {
		t.Fatalf("empty ring publishes %d arcs, want all 57", got)
	}
	if err := e.prepare("u1", arc(2, 2)); err != nil {
		t.Fatal(err)
	}
	if err := e.prepare("u2", arc(6, 1)); err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		t.Helper()
		got := publishedArcs(t, e)
		for _, a := range []alloc.Arc{{Start: 2, Size: 2}, {Start: 6, Size: 1}} {
			if !slices.Contains(got, a) {
				t.Fatalf("%s: prepared %s not published: %v", when, arcslice.DeviceName(a), got)
			}
		}
		for _, a := range got {
			if a == (alloc.Arc{Start: 2, Size: 2}) || a == (alloc.Arc{Start: 6, Size: 1}) {
				continue
			}
			for i := 0; i < a.Size; i++ {
				if p := (a.Start + i) % 8; p == 2 || p == 3 || p == 6 {
					t.Fatalf("%s: %s touches held lpu%d and is not allocated", when, arcslice.DeviceName(a), p)
				}
			}
		}
		if want := free8(2, 3, 6) + 2; len(got) != want {
			t.Fatalf("%s: %d arcs published, want %d free + 2 allocated", when, len(got), want-2)
		}
	}
	check("prepared")
	e.restart()
	check("after restart")
	if err := e.unprepare("u1"); err != nil {
		t.Fatal(err)
	}
	if got, want := len(publishedArcs(t, e)), free8(6)+1; got != want {
		t.Fatalf("after unprepare u1: %d arcs, want %d", got, want)
	}
}

// Between the scheduler's allocation and the node's Prepare, the pool the
// scheduler allocated from is what stays published; a Prepare of another
// claim in that window still publishes the allocated arc, because no
// prepared claim holds its LPUs (the allocator never gives overlapping
// arcs).
func TestAllocatedArcStaysPublishedUntilPrepared(t *testing.T) {
	e := newEnv(t, healthtest.New(t, healthtest.Ring(8)))
	pending := alloc.Arc{Start: 4, Size: 4} // in claim u2's allocation, not yet prepared
	if !slices.Contains(publishedArcs(t, e), pending) {
		t.Fatal("the 4-arc the scheduler picks is not published")
	}
	if err := e.prepare("u1", arc(0, 2)); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(publishedArcs(t, e), pending) {
		t.Fatalf("republish after u1's Prepare dropped %s, allocated to u2", arcslice.DeviceName(pending))
	}
	if err := e.prepare("u2", arc(4, 4)); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(publishedArcs(t, e), pending) {
		t.Fatalf("%s dropped once prepared", arcslice.DeviceName(pending))
	}
}

// lastLabels records the labels every publication sets.
type lastLabels struct{ got map[string]string }

func (l *lastLabels) Set(labels map[string]string) { l.got = labels }

// Every publication hands the node labels of the view it publishes: the
// largest free published arc and the free LPUs, lowered by Prepare and
// raised by Unprepare, but never below what a prepared claim holds (the
// kubelet re-checks a running pod's node affinity when it restarts);
// while PodResources has not answered, only the prepared claims count.
func TestPublishSetsNodeLabels(t *testing.T) {
	rec := &lastLabels{}
	e := &env{t: t, stateDir: t.TempDir(), cdiDir: filepath.Join(t.TempDir(), "cdi"), devices: healthtest.New(t, healthtest.Ring(8)),
		arcSizes: []int{1, 2, 4, 8}, labels: rec}
	e.restart()
	want := func(when, arc, lpus string) {
		t.Helper()
		if err := e.p.Publish(context.Background(), &sink{}); err != nil {
			t.Fatal(err)
		}
		if rec.got[arcslice.LabelLargestFreeArc] != arc || rec.got[arcslice.LabelFreeLPUs] != lpus {
			t.Fatalf("%s: labels %v, want largest-free-arc %s, free-lpus %s", when, rec.got, arc, lpus)
		}
	}
	want("empty ring", "8", "8")
	if err := e.prepare("u1", arc(0, 2)); err != nil {
		t.Fatal(err)
	}
	want("a 2-arc prepared", "4", "4") // 6 free in a row: the largest published size under it is 4
	if err := e.prepare("u2", arc(4, 1)); err != nil {
		t.Fatal(err)
	}
	want("and a single", "2", "4") // runs of 2 and 3, 5 free
	if err := e.unprepare("u1"); err != nil {
		t.Fatal(err)
	}
	want("u1 unprepared", "4", "4") // a run of 7 from 5 round to 3
	if err := e.unprepare("u2"); err != nil {
		t.Fatal(err)
	}
	if err := e.prepare("u3", arc(0, 8)); err != nil {
		t.Fatal(err)
	}
	want("the whole ring prepared", "8", "8") // nothing free, but its pod asked for 8
	if err := e.unprepare("u3"); err != nil {
		t.Fatal(err)
	}
	if err := e.prepare("u4", arc(2, 1)); err != nil {
		t.Fatal(err)
	}
	e.dp.unanswered = true // read, never answered yet
	want("PodResources not answered", "1", "1")
}

func TestRunPublisherRefusesAnUnpublishableNode(t *testing.T) {
	inv := &device.Inventory{}
	var ring []string
	for i := 0; i < 33; i++ {
		inv.Devices = append(inv.Devices, device.Device{ID: device.ID(i), Index: i, Health: device.Health{Healthy: true}})
		ring = append(ring, device.ID(i))
	}
	inv.Rings = [][]string{ring}
	e := newEnv(t, healthtest.New(t, inv))
	rec := &sink{}
	err := e.p.Run(context.Background(), rec)
	if err == nil || !strings.Contains(err.Error(), "node node-a: ring 0 (lpu0…lpu32) has 33 LPUs") {
		t.Fatalf("err = %v", err)
	}
	if rec.count() != 0 {
		t.Fatal("something was published")
	}
}

func TestNodeWithoutLPUsPublishesAnEmptyPool(t *testing.T) {
	e := newEnv(t, healthtest.New(t, &device.Inventory{}))
	res, err := e.p.Resources()
	if err != nil {
		t.Fatal(err)
	}
	if p := res.Pools[node]; len(p.Slices) != 1 || len(p.Slices[0].Devices) != 0 {
		t.Fatalf("pool %+v, want one empty slice", p)
	}
}

// With dra.arcSizes only those sizes are published, in the order the
// full set has them, and an arc of another size (allocated before the
// config changed) still prepares and stays published while prepared.
func TestArcSizesLimitPublishedDevices(t *testing.T) {
	published := func(e *env) []string {
		t.Helper()
		if err := e.prepare("u1", arc(0, 2)); err != nil {
			t.Fatal(err)
		}
		res, err := e.p.Resources()
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, sl := range res.Pools[node].Slices {
			for _, d := range sl.Devices {
				if !strings.HasSuffix(d.Name, "-count") {
					names = append(names, d.Name)
				}
			}
		}
		return names
	}
	some := newEnv(t, healthtest.New(t, healthtest.Ring(8)))
	some.arcSizes = []int{1, 4}
	some.restart()
	got := published(some)
	var want []string
	for _, n := range published(newEnv(t, healthtest.New(t, healthtest.Ring(8)))) {
		if strings.HasSuffix(n, "-size1") || strings.HasSuffix(n, "-size4") {
			want = append(want, n)
		}
	}
	// The allocated 2-arc stays published; the rest are the free arcs
	// (6 singles, 3 quads clear of lpu0 and lpu1) in full order.
	allocated := "ring0-start0-size2"
	if !slices.Contains(got, allocated) {
		t.Fatalf("published %v without the allocated %s", got, allocated)
	}
	got = slices.DeleteFunc(got, func(n string) bool { return n == allocated })
	if len(got) != 9 || !slices.Equal(got, want) {
		t.Fatalf("published %v,\nwant the 9 free arcs of sizes 1 and 4 in full order %v", got, want)
	}
}

package driver

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"testing"

	"github.com/hyperaccel/lpu-node/internal/podresources"
	"github.com/hyperaccel/lpu-node/pkg/alloc"
	"github.com/hyperaccel/lpu-node/pkg/arcslice"
)

// publishedArcs is every device of the node's pool now, in order.
func publishedArcs(t *testing.T, e *env) []alloc.Arc {
	t.Helper()
	res, err := e.d.Resources()
	if err != nil {
		t.Fatal(err)
	}
	var out []alloc.Arc
	for _, sl := range res.Pools[node].Slices {
		for _, d := range sl.Devices {
			a, err := arcslice.ParseDeviceName(d.Name)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, a)
		}
	}
	return out
}

// free8 counts the arcs of a ring of 8 clear of the held positions.
func free8(held ...int) int {
	n := 0
	for size := 1; size <= 8; size++ {
		starts := 8
		if size == 8 {
			starts = 1
		}
		for s := 0; s < starts; s++ {
			clear := true
			for i := 0; i < size; i++ {
				if slices.Contains(held, (s+i)%8) {
					clear = false
				}
			}
			if clear {
				n++
			}
		}
	}
	return n
}

// The pool holds the free arcs and the arcs of prepared claims, across a
// restart (the checkpoint names the devices); an Unprepare brings the
// rest back.
func TestPublishesFreeAndPreparedArcs(t *testing.T) {
	e := newEnv(t, newStatic(t, ring8()))
	if got := len(publishedArcs(t, e)); got != 57 {
		t.Fatalf("empty ring publishes %d arcs, want all 57", got)
	}
	if r := e.prepare(claim("u1", arc(2, 2))); r.Err != nil {
		t.Fatal(r.Err)
	}
	if r := e.prepare(claim("u2", arc(6, 1))); r.Err != nil {
		t.Fatal(r.Err)
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
	e := newEnv(t, newStatic(t, ring8()))
	pending := alloc.Arc{Start: 4, Size: 4} // in claim u2's allocation, not yet prepared
	if !slices.Contains(publishedArcs(t, e), pending) {
		t.Fatal("the 4-arc the scheduler picks is not published")
	}
	if r := e.prepare(claim("u1", arc(0, 2))); r.Err != nil {
		t.Fatal(r.Err)
	}
	if !slices.Contains(publishedArcs(t, e), pending) {
		t.Fatalf("republish after u1's Prepare dropped %s, allocated to u2", arcslice.DeviceName(pending))
	}
	if r := e.prepare(claim("u2", arc(4, 4))); r.Err != nil {
		t.Fatal(r.Err)
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
	e := &env{t: t, stateDir: t.TempDir(), cdiDir: filepath.Join(t.TempDir(), "cdi"), devices: newStatic(t, ring8()),
		arcSizes: []int{1, 2, 4, 8}, labels: rec}
	e.restart()
	want := func(when, arc, lpus string) {
		t.Helper()
		if err := e.d.pub.Publish(context.Background(), newRecorder()); err != nil {
			t.Fatal(err)
		}
		if rec.got[arcslice.LabelLargestFreeArc] != arc || rec.got[arcslice.LabelFreeLPUs] != lpus {
			t.Fatalf("%s: labels %v, want largest-free-arc %s, free-lpus %s", when, rec.got, arc, lpus)
		}
	}
	want("empty ring", "8", "8")
	if r := e.prepare(claim("u1", arc(0, 2))); r.Err != nil {
		t.Fatal(r.Err)
	}
	want("a 2-arc prepared", "4", "4") // 6 free in a row: the largest published size under it is 4
	if r := e.prepare(claim("u2", arc(4, 1))); r.Err != nil {
		t.Fatal(r.Err)
	}
	want("and a single", "2", "4") // runs of 2 and 3, 5 free
	if err := e.unprepare("u1"); err != nil {
		t.Fatal(err)
	}
	want("u1 unprepared", "4", "4") // a run of 7 from 5 round to 3
	if err := e.unprepare("u2"); err != nil {
		t.Fatal(err)
	}
	if r := e.prepare(claim("u3", arc(0, 8))); r.Err != nil {
		t.Fatal(r.Err)
	}
	want("the whole ring prepared", "8", "8") // nothing free, but its pod asked for 8
	if err := e.unprepare("u3"); err != nil {
		t.Fatal(err)
	}
	if r := e.prepare(claim("u4", arc(2, 1))); r.Err != nil {
		t.Fatal(r.Err)
	}
	e.d.opts.DevicePlugin = noAnswer{} // read, never answered yet
	want("PodResources not answered", "1", "1")
}

// noAnswer is a PodResources that has not answered.
type noAnswer struct{}

func (noAnswer) Holders(context.Context) (map[string]podresources.Holder, error) {
	return nil, errors.New("not yet")
}

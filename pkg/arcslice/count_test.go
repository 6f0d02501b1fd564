package arcslice

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/hyperaccel/lpu-node/pkg/alloc"
)

// Every LPU has one count device: named for its single arc, holding the
// same counter, with countPath true where every arc has it false, and
// published after every arc.
func TestCountDevices(t *testing.T) {
	inv := inventory(2, 8)
	b, err := NewBuilder(inv, Options{Sizes: []int{2, 4}})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[alloc.Arc]bool{}
	counting := false
	for _, s := range b.Slices(nil, nil) {
		for _, d := range s.Devices {
			a, err := ParseDeviceName(d.Name)
			if err != nil {
				t.Fatal(err)
			}
			cp := d.Attributes[CountPathAttribute].BoolValue
			if cp == nil {
				t.Fatalf("%s has no %s", d.Name, CountPathAttribute)
			}
			if d.Name != CountDeviceName(a) {
				if *cp || counting {
					t.Fatalf("arc %s: countPath %v, after a count device %v", d.Name, *cp, counting)
				}
				continue
			}
			counting = true
			if !*cp || a.Size != 1 || seen[a] {
				t.Fatalf("count device %s: countPath %v, arc %v, seen before %v", d.Name, *cp, a, seen[a])
			}
			seen[a] = true
			ids := b.Layout().ArcIDs(a)
			if len(d.ConsumesCounters) != 1 || len(d.ConsumesCounters[0].Counters) != 1 || d.ConsumesCounters[0].CounterSet != CounterSetName(a.Ring) {
				t.Fatalf("count device %s consumes %+v", d.Name, d.ConsumesCounters)
			}
			if _, ok := d.ConsumesCounters[0].Counters[ids[0]]; !ok || *d.Attributes["lpus"].StringValue != ids[0] {
				t.Fatalf("count device %s: counters %+v, lpus %v, want %s", d.Name, d.ConsumesCounters, d.Attributes["lpus"], ids[0])
			}
		}
	}
	if len(seen) != len(inv.Devices) {
		t.Fatalf("%d count devices for %d LPUs", len(seen), len(inv.Devices))
	}
	// A count device's name round-trips to its LPU's single arc.
	if a, err := ParseDeviceName("ring1-start7-count"); err != nil || a != (alloc.Arc{Ring: 1, Start: 7, Size: 1}) {
		t.Fatalf("ParseDeviceName(ring1-start7-count) = %v, %v", a, err)
	}
	for _, bad := range []string{"ring1-start7-counts", "ring1-count", "ring1-start07-count"} {
		if _, err := ParseDeviceName(bad); err == nil {
			t.Errorf("ParseDeviceName(%q) accepted", bad)
		}
	}
}

// CountOrder lists every LPU once, the free ones first; the first k of
// it are one run of ring neighbours whenever some ring has k free
// neighbours, for random holdings of 1 to 4 rings of 8 and of 16.
func TestCountOrderLongestRunFirst(t *testing.T) {
	rng := rand.New(rand.NewPCG(46, 2))
	for _, shape := range [][2]int{{1, 8}, {2, 8}, {4, 8}, {1, 16}} {
		inv := inventory(shape[0], shape[1])
		b, err := NewBuilder(inv, Options{})
		if err != nil {
			t.Fatal(err)
		}
		l := b.Layout()
		for step := range 300 {
			var held []string
			for _, d := range inv.Devices {
				if rng.IntN(3) == 0 {
					held = append(held, d.ID)
				}
			}
			sick := map[string]bool{}
			if rng.IntN(4) == 0 {
				sick[inv.Devices[rng.IntN(len(inv.Devices))].ID] = true
			}
			busy := func(id string) bool { return slices.Contains(held, id) || sick[id] }
			order := b.CountOrder(held, sick)
			var ids []string
			for _, a := range order {
				ids = append(ids, l.ArcIDs(a)...)
			}
			free := 0
			for i, id := range ids {
				if !busy(id) {
					free++
					if i >= free {
						t.Fatalf("%v step %d: free %s after a held LPU in %v", shape, step, id, ids)
					}
				}
			}
			if len(ids) != len(inv.Devices) || len(slices.Compact(slices.Sorted(slices.Values(ids)))) != len(ids) {
				t.Fatalf("%v step %d: order %v is not every LPU once", shape, step, ids)
			}
			for k := 1; k <= free; k++ {
				longest := 0
				for _, run := range l.LargestFreeArc(slices.DeleteFunc(slices.Clone(ids), busy)) {
					longest = max(longest, run)
				}
				if k > longest {
					break
				}
				first := order[:k]
				n := shape[1]
				for i, a := range first {
					if a.Ring != first[0].Ring || a.Start != (first[0].Start+i)%n {
						t.Fatalf("%v step %d: a free run of %d exists, first %d of the order %v", shape, step, longest, k, first)
					}
				}
			}
		}
	}
}

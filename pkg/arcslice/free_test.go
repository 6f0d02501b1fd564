package arcslice

import (
	"maps"
	"math/rand/v2"
	"slices"
	"strings"

	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/hyperaccel/lpu-node/pkg/alloc"
)

// arcsOf lists the devices of built, in order, as arcs, and counts the
// counter sets. Count devices are left out (countsOf).
func arcsOf(t *testing.T, built []resourceslice.Slice) ([]alloc.Arc, int) {
	t.Helper()
	var out []alloc.Arc
	sets := 0
	for _, s := range built {
		sets += len(s.SharedCounters)
		for _, d := range s.Devices {
			if isCount(d) {
				continue
			}
			a, err := ParseDeviceName(d.Name)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, a)
		}
	}
	return out, sets
}

// FreeSlices publishes exactly the arcs clear of held LPUs plus the
// allocated ones, each size in alloc.ArcOrder's order, interleaved,
// whatever the node's state.
func TestFreeSlicesKeepsFreeAndAllocatedInOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 9))
	for _, shape := range [][2]int{{1, 8}, {2, 8}, {4, 8}, {1, 16}} {
		inv := inventory(shape[0], shape[1])
		b, err := NewBuilder(inv, Options{})
		if err != nil {
			t.Fatal(err)
		}
		layout := b.Layout()
		for step := 0; step < 200; step++ {
			held, allocated := randomHolding(rng, layout)
			got, sets := arcsOf(t, b.FreeSlices(held, allocated, nil))
			want := slices.DeleteFunc(layout.ArcOrder(held), func(a alloc.Arc) bool {
				return !slices.Contains(allocated, a) && touches(layout, a, held)
			})
			checkInterleaved(t, got, want)
			if sets != shape[0] {
				t.Fatalf("%d counter sets, want one per ring", sets)
			}
			for _, a := range allocated {
				if !slices.Contains(got, a) {
					t.Fatalf("allocated %s not published", DeviceName(a))
				}
			}
		}
	}
}

// randomHolding places random non-overlapping arcs on layout: the LPUs
// they hold and the arcs.
func randomHolding(rng *rand.Rand, layout *alloc.Layout) ([]string, []alloc.Arc) {
	var held []string
	var arcs []alloc.Arc
	all := layout.Arcs()
	for range rng.IntN(6) {
		a := all[rng.IntN(len(all))]
		if touches(layout, a, held) {
			continue
		}
		held = append(held, layout.ArcIDs(a)...)
		arcs = append(arcs, a)
	}
	return held, arcs
}

func touches(layout *alloc.Layout, a alloc.Arc, held []string) bool {
	for _, id := range layout.ArcIDs(a) {
		if slices.Contains(held, id) {
			return true
		}
	}
	return false
}

func TestFreeSlicesEdges(t *testing.T) {
	inv := inventory(1, 8)
	inv.Devices[6].Health.Healthy = false
	b, err := NewBuilder(inv, Options{Sizes: []int{1, 2, 4, 8}})
	if err != nil {
		t.Fatal(err)
	}
	// A 3-arc (a size the node does not offer, e.g. published before
	// dra.arcSizes changed) is allocated: it stays; an arc the ring lacks
	// is ignored.
	three := alloc.Arc{Ring: 0, Start: 0, Size: 3}
	got, _ := arcsOf(t, b.FreeSlices([]string{"lpu0", "lpu1", "lpu2"}, []alloc.Arc{three, {Ring: 3, Start: 0, Size: 1}}, Unhealthy(inv)))
	if !slices.Contains(got, three) {
		t.Fatalf("allocated 3-arc dropped: %v", got)
	}
	sizes := map[int]int{}
	for _, a := range got {
		sizes[a.Size]++
		if a != three && touches(b.Layout(), a, []string{"lpu0", "lpu1", "lpu2"}) {
			t.Fatalf("%s touches a held LPU and is not allocated", DeviceName(a))
		}
	}
	// Free: lpu3..lpu7 (lpu6 unhealthy but held by no claim: its arcs stay,
	// tainted). 5 singles, 4 pairs (3-4 4-5 5-6 6-7), 2 quads, no 8.
	if want := map[int]int{1: 5, 2: 4, 3: 1, 4: 2}; !maps.Equal(sizes, want) {
		t.Fatalf("published sizes %v, want %v", sizes, want)
	}
	tainted := 0
	for _, s := range b.FreeSlices([]string{"lpu0", "lpu1", "lpu2"}, []alloc.Arc{three}, Unhealthy(inv)) {
		for _, d := range s.Devices {
			if len(d.Taints) > 0 {
				tainted++
			}
		}
	}
	if tainted != 1+2+2+1 { // lpu6, 5-6 6-7, 3-6 4-7, and lpu6's count device
		t.Fatalf("%d tainted devices, want 6", tainted)
	}
	// Nothing held: the same as Slices.
	if free, all := b.FreeSlices(nil, nil, nil), b.Slices(nil, nil); len(free) != len(all) {
		t.Fatalf("empty node: %d slices, Slices gives %d", len(free), len(all))
	}
}

// isCount reports whether d is a count device.
func isCount(d resourceapi.Device) bool { return strings.HasSuffix(d.Name, "-count") }

package arcslice

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/hyperaccel/lpu-node/pkg/alloc"
	"github.com/hyperaccel/lpu-node/pkg/device"
)

// Free agrees with what FreeSlices publishes for the same state: Arc is
// the largest untainted published arc clear of held LPUs, LPUs the free
// healthy count rounded down to a published size, on every shape, size
// set and random holding with random sick LPUs.
func TestFreeMatchesFreeSlices(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 11))
	for _, shape := range [][2]int{{1, 8}, {2, 8}, {4, 8}, {1, 16}, {3, 5}} {
		for _, sizes := range [][]int{nil, {1, 2, 4, 8}, {3, 5}, {8}, {2}} {
			inv := inventory(shape[0], shape[1])
			b, err := NewBuilder(inv, Options{Sizes: sizes})
			if err != nil {
				t.Fatal(err)
			}
			layout := b.Layout()
			for step := 0; step < 300; step++ {
				held, _ := randomHolding(rng, layout)
				sick := map[string]bool{}
				for range rng.IntN(3) {
					sick[inv.Devices[rng.IntN(len(inv.Devices))].ID] = true
				}
				got := b.Free(held, sick)
				want := Free{}
				for _, s := range b.FreeSlices(held, nil, sick) {
					for _, d := range s.Devices {
						a, err := ParseDeviceName(d.Name)
						if err != nil {
							t.Fatal(err)
						}
						if len(d.Taints) == 0 && !isCount(d) {
							want.Arc = max(want.Arc, a.Size)
						}
					}
				}
				count := 0
				for _, dev := range inv.Devices {
					if !slices.Contains(held, dev.ID) && !sick[dev.ID] {
						count++
					}
				}
				want.LPUs = count
				if len(sizes) > 0 {
					want.LPUs = 0
					for _, k := range sizes {
						if k <= count {
							want.LPUs = max(want.LPUs, k)
						}
					}
				}
				if got != want {
					t.Fatalf("shape %v sizes %v held %v sick %v: Free = %+v, want %+v", shape, sizes, held, sick, got, want)
				}
			}
		}
	}
}

// A claim of a published size k fits on a node exactly when the node's
// largest-free-arc value is at least k, so a prefilter that drops nodes
// whose value is below k (the chart's NotIn list) never drops a node
// where the claim fits.
func TestArcLabelBelowKOnlyWhenNoKArcFits(t *testing.T) {
	sizes := []int{1, 2, 4, 8}
	inv := inventory(1, 8)
	b, err := NewBuilder(inv, Options{Sizes: sizes})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(5, 1))
	for step := 0; step < 500; step++ {
		held, _ := randomHolding(rng, b.Layout())
		f := b.Free(held, nil)
		free := b.Layout().LargestFreeArc(without(inv, held))
		for _, k := range sizes {
			excluded := f.Arc < k
			fits := slices.Max(append(free, 0)) >= k
			if excluded == fits {
				t.Fatalf("held %v: arc label %d, a %d-arc fits: %v", held, f.Arc, k, fits)
			}
		}
	}
	if got := (Free{Arc: 4, LPUs: 2}).Labels(); got[LabelLargestFreeArc] != "4" || got[LabelFreeLPUs] != "2" {
		t.Errorf("Labels = %v", got)
	}
}

// without lists inv's LPU IDs that are not in held.
func without(inv *device.Inventory, held []string) []string {
	var out []string
	for _, d := range inv.Devices {
		if !slices.Contains(held, d.ID) {
			out = append(out, d.ID)
		}
	}
	return out
}

// Holding raises each value to what one claim holds, never lowers it.
func TestHolding(t *testing.T) {
	tests := map[string]struct {
		free Free
		arcs []alloc.Arc
		want Free
	}{
		"nothing held":            {Free{Arc: 4, LPUs: 4}, nil, Free{Arc: 4, LPUs: 4}},
		"a full ring's 8-arc":     {Free{}, []alloc.Arc{{Size: 8}}, Free{Arc: 8, LPUs: 8}},
		"four singles":            {Free{Arc: 2, LPUs: 2}, []alloc.Arc{{Size: 1}, {Start: 2, Size: 1}, {Start: 4, Size: 1}, {Start: 6, Size: 1}}, Free{Arc: 2, LPUs: 4}},
		"below what is free":      {Free{Arc: 8, LPUs: 8}, []alloc.Arc{{Size: 2}}, Free{Arc: 8, LPUs: 8}},
		"two 4-arcs in one claim": {Free{}, []alloc.Arc{{Size: 4}, {Start: 4, Size: 4}}, Free{Arc: 4, LPUs: 8}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := tc.free.Holding(tc.arcs); got != tc.want {
				t.Errorf("Holding = %+v, want %+v", got, tc.want)
			}
		})
	}
}

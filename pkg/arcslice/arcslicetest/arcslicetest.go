// Package arcslicetest reads back, for tests, what a driver built with
// arcslice publishes.
package arcslicetest

import (
	"testing"

	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/hyperaccel/lpu-node/pkg/alloc"
	"github.com/hyperaccel/lpu-node/pkg/arcslice"
)

// Arcs is every arc device of pool in res, in published order, as arcs
// (count devices left out: Counts); a resources error or a device name
// that is not an arc fails t.
func Arcs(t testing.TB, res resourceslice.DriverResources, err error, pool string) []alloc.Arc {
	return devices(t, res, err, pool, false)
}

// Counts is every count device of pool in res, in published order, as the
// single-LPU arcs of their LPUs.
func Counts(t testing.TB, res resourceslice.DriverResources, err error, pool string) []alloc.Arc {
	return devices(t, res, err, pool, true)
}

func devices(t testing.TB, res resourceslice.DriverResources, err error, pool string, counts bool) []alloc.Arc {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	var out []alloc.Arc
	for _, sl := range res.Pools[pool].Slices {
		for _, d := range sl.Devices {
			a, err := arcslice.ParseDeviceName(d.Name)
			if err != nil {
				t.Fatal(err)
			}
			if (d.Name == arcslice.CountDeviceName(a)) == counts {
				out = append(out, a)
			}
		}
	}
	return out
}

// FreeArcs counts the arcs of a ring of n (every size at every start, the
// whole ring once) that hold none of the positions held.
func FreeArcs(n int, held ...int) int {
	busy := make(map[int]bool, len(held))
	for _, p := range held {
		busy[p] = true
	}
	count := 0
	for size := 1; size <= n; size++ {
		starts := n
		if size == n {
			starts = 1
		}
	next:
		for s := 0; s < starts; s++ {
			for i := 0; i < size; i++ {
				if busy[(s+i)%n] {
					continue next
				}
			}
			count++
		}
	}
	return count
}

package main

import (
	"cmp"
	"slices"

	"github.com/hyperaccel/lpu-node/pkg/alloc"
)

// countPath is a pod asking hyperaccel.ai/lpu: k on a DRA node, the
// extended resource served by a DeviceClass over single-LPU devices: the
// scheduler's allocator takes the first k free singles in published order,
// with no way to ask that they be neighbours. static publishes the singles
// in ring order; dynamic republishes them after every change run by run,
// the longest free run first, so that the first k free singles lie in one
// run whenever a run of k is free.
type countPath struct {
	l       *alloc.Layout
	dynamic bool
}

func (c countPath) Name() string {
	if c.dynamic {
		return "count-dynamic"
	}
	return "count-static"
}

// Pick takes the first size free singles in published order (available
// is in ring order).
func (c countPath) Pick(available []string, size int) []string {
	if size > len(available) {
		return nil
	}
	if !c.dynamic {
		return slices.Clone(available[:size])
	}
	var out []string
	for _, run := range freeRuns(c.l.Rings(), available) {
		out = append(out, run...)
		if len(out) >= size {
			break
		}
	}
	return out[:size]
}

// freeRuns returns the maximal runs of free LPUs on each ring (a run may
// wrap around), longest first; among equals, in ring order.
func freeRuns(rings [][]string, available []string) [][]string {
	free := make(map[string]bool, len(available))
	for _, id := range available {
		free[id] = true
	}
	type run struct {
		ring, start int
		ids         []string
	}
	var runs []run
	for r, ring := range rings {
		n := len(ring)
		busy := slices.IndexFunc(ring, func(id string) bool { return !free[id] })
		if busy < 0 {
			runs = append(runs, run{ring: r, ids: slices.Clone(ring)})
			continue
		}
		// walk once around the ring from a busy LPU, so no run is split
		var cur []string
		start := 0
		for i := 1; i <= n; i++ {
			p := (busy + i) % n
			if free[ring[p]] {
				if cur == nil {
					start = p
				}
				cur = append(cur, ring[p])
				continue
			}
			if cur != nil {
				runs = append(runs, run{ring: r, start: start, ids: cur})
				cur = nil
			}
		}
	}
	slices.SortStableFunc(runs, func(a, b run) int {
		if c := cmp.Compare(len(b.ids), len(a.ids)); c != 0 {
			return c
		}
		if c := cmp.Compare(a.ring, b.ring); c != 0 {
			return c
		}
		return cmp.Compare(a.start, b.start)
	})
	out := make([][]string, len(runs))
	for i, r := range runs {
		out[i] = r.ids
	}
	return out
}

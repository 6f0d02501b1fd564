package alloc

import (
	"fmt"
	"strconv"
	"strings"
)

// loc is where a device sits: its ring and its position on that ring.
type loc struct {
	ring, pos int
}

// Layout is the ring topology of one node: which device IDs sit next to
// each other. It is immutable after NewLayout and safe for concurrent use.
type Layout struct {
	rings  [][]string
	offset []int // offset[r] is the flat index of ring r's position 0
	total  int   // number of devices over all rings
	// maxSegs bounds the free segments of any state: a ring of n ≥ 2
	// positions has at most n/2 (every other position free), of 1 at most 1.
	maxSegs int
	loc     map[string]loc
}

// NewLayout builds a Layout from rings of device IDs, each ring listed in
// ring order (the last ID is the neighbour of the first). It rejects empty
// rings, empty IDs and IDs listed twice, naming the offending ring or ID.
func NewLayout(rings [][]string) (*Layout, error) {
	l := &Layout{
		rings:  make([][]string, len(rings)),
		offset: make([]int, len(rings)),
		loc:    make(map[string]loc),
	}
	for r, ring := range rings {
		if len(ring) == 0 {
			return nil, fmt.Errorf("ring %d: empty ring", r)
		}
		l.offset[r] = l.total
		l.rings[r] = append([]string(nil), ring...)
		for p, id := range ring {
			if id == "" {
				return nil, fmt.Errorf("ring %d position %d: empty device ID", r, p)
			}
			if prev, dup := l.loc[id]; dup {
				return nil, fmt.Errorf("device %q listed twice: ring %d position %d and ring %d position %d",
					id, prev.ring, prev.pos, r, p)
			}
			l.loc[id] = loc{ring: r, pos: p}
		}
		l.total += len(ring)
		l.maxSegs += max(1, len(ring)/2)
	}
	return l, nil
}

// Rings returns a copy of the rings, each in ring order.
func (l *Layout) Rings() [][]string {
	out := make([][]string, len(l.rings))
	for r, ring := range l.rings {
		out[r] = append([]string(nil), ring...)
	}
	return out
}

// freeMask marks the known IDs of available in a flat per-position slice
// and returns it with the number of distinct known IDs marked. Unknown IDs
// are ignored.
func (l *Layout) freeMask(available []string) ([]bool, int) {
	free := make([]bool, l.total)
	n := 0
	for _, id := range available {
		lc, ok := l.loc[id]
		if !ok {
			continue
		}
		i := l.offset[lc.ring] + lc.pos
		if !free[i] {
			free[i] = true
			n++
		}
	}
	return free, n
}

// LargestFreeArc returns, for each ring (index = ring index), the length of
// the longest run of ring neighbours that are all in available. Wrap-around
// runs count; a fully available ring reports its full length. Unknown IDs
// are ignored.
func (l *Layout) LargestFreeArc(available []string) []int {
	free, _ := l.freeMask(available)
	out := make([]int, len(l.rings))
	for r, ring := range l.rings {
		out[r] = largestRun(free[l.offset[r] : l.offset[r]+len(ring)])
	}
	return out
}

// largestRun is the longest circular run of true values in free.
func largestRun(free []bool) int {
	best := 0
	forEachSegment(free, func(start, length int) {
		best = max(best, length)
	})
	return best
}

// forEachSegment calls fn for every maximal circular run of true values in
// free, with the run's first position and its length. A fully free ring is
// one run starting at 0 with length len(free). Runs are reported in
// ascending order of where the scan meets them, starting after the first
// busy position.
func forEachSegment(free []bool, fn func(start, length int)) {
	n := len(free)
	busy := -1
	for i, f := range free {
		if !f {
			busy = i
			break
		}
	}
	if busy < 0 {
		if n > 0 {
			fn(0, n)
		}
		return
	}
	run, start := 0, 0
	for k := 1; k <= n; k++ {
		i := (busy + k) % n
		if free[i] {
			if run == 0 {
				start = i
			}
			run++
			continue
		}
		if run > 0 {
			fn(start, run)
			run = 0
		}
	}
}

// Placement is a set of devices ordered along its ring, with whether it is
// one ring-contiguous arc.
type Placement struct {
	// IDs in ring order, starting at the arc's first position (for a
	// wrap-around arc 7-0-1: lpu7, lpu0, lpu1). A set that is not one arc
	// starts after its largest gap; a set spanning rings is ordered by ring.
	IDs []string
	// Ring is the ring index of the set, or -1 when it spans rings (or is empty).
	Ring int
	// Contiguous is true when IDs are consecutive ring neighbours on one ring.
	Contiguous bool
	// Reason says why the set is not contiguous; empty when it is.
	Reason string
}

// Check orders ids (typically what kubelet chose) along their ring and says
// whether they form one contiguous arc. It fails only for unknown or
// duplicate IDs, naming them.
func (l *Layout) Check(ids []string) (Placement, error) {
	seen := make(map[string]bool, len(ids))
	sel := make([]loc, 0, len(ids))
	var unknown, dups []string
	for _, id := range ids {
		lc, ok := l.loc[id]
		if !ok {
			unknown = append(unknown, strconv.Quote(id))
			continue
		}
		if seen[id] {
			dups = append(dups, id)
		}
		seen[id] = true
		sel = append(sel, lc)
	}
	if len(unknown) > 0 {
		return Placement{}, fmt.Errorf("unknown device IDs: %s", strings.Join(unknown, ","))
	}
	if len(dups) > 0 {
		return Placement{}, fmt.Errorf("duplicate device IDs: %s", strings.Join(dups, ","))
	}
	if len(ids) == 0 {
		return Placement{Ring: -1, Reason: "no devices"}, nil
	}

	sortLocs(sel)
	if sel[0].ring != sel[len(sel)-1].ring {
		var names []string
		ringGroups(sel, func(r int, _ []loc) { names = append(names, strconv.Itoa(r)) })
		return Placement{
			IDs:    l.ordered(sel),
			Ring:   -1,
			Reason: "spans rings " + strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1],
		}, nil
	}
	r := sel[0].ring
	start, runs := arcOrder(sel, len(l.rings[r]))
	p := Placement{IDs: l.appendArc(nil, r, sel, start), Ring: r, Contiguous: runs == 1}
	if !p.Contiguous {
		p.Reason = "not ring neighbours: " + strings.Join(p.IDs, ",")
	}
	return p, nil
}

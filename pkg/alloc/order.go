package alloc

import "slices"

// Arc is a run of Size consecutive positions on ring Ring starting at
// position Start; it wraps around the ring's end. The whole ring is the arc
// with Start 0 and Size equal to the ring length.
type Arc struct {
	Ring, Start, Size int
}

// ArcIDs returns the device IDs of a, in ring order from its first position.
// It returns nil for an arc the layout does not have.
func (l *Layout) ArcIDs(a Arc) []string {
	if a.Ring < 0 || a.Ring >= len(l.rings) {
		return nil
	}
	ring := l.rings[a.Ring]
	n := len(ring)
	if a.Size <= 0 || a.Size > n || a.Start < 0 || a.Start >= n {
		return nil
	}
	out := make([]string, a.Size)
	for i := range out {
		out[i] = ring[(a.Start+i)%n]
	}
	return out
}

// Arcs returns every arc of the layout once: on each ring of n devices
// every size 1..n-1 at every start, and the whole ring at start 0. They
// come by ring, then size, then start.
func (l *Layout) Arcs() []Arc {
	var out []Arc
	for r, ring := range l.rings {
		n := len(ring)
		for size := 1; size <= n; size++ {
			starts := n
			if size == n {
				starts = 1
			}
			for start := 0; start < starts; start++ {
				out = append(out, Arc{Ring: r, Start: start, Size: size})
			}
		}
	}
	return out
}

// ArcOrder returns every arc of the layout (as Arcs) in the order this
// package would pick them now, given the devices that are held (taken or
// unusable; unknown IDs are ignored).
//
// Arcs come by size, smallest first. Within a size, the arcs whose devices
// are all free come first, best first by the score Preferred uses, so the
// first free arc of each size is exactly what Preferred(free, nil, size)
// answers; arcs touching a held device follow by ring and start. A DRA
// allocator that takes the first fitting device in published order then
// makes the choice Preferred would make. With held empty the result is the
// static order of an empty node.
func (l *Layout) ArcOrder(held []string) []Arc {
	busy, _ := l.freeMask(held)
	free := make([]bool, len(busy))
	for i, b := range busy {
		free[i] = !b
	}
	st := l.stats(free)
	maxN := 0
	for _, ring := range l.rings {
		maxN = max(maxN, len(ring))
	}

	out := make([]Arc, 0, l.arcCount())
	var scored []score
	for size := 1; size <= maxN; size++ {
		scored = scored[:0]
		l.eachArc(st, nil, -1, size, func(c score) { scored = append(scored, c) })
		slices.SortFunc(scored, func(a, b score) int {
			switch {
			case a.better(b):
				return -1
			case b.better(a):
				return 1
			}
			return 0
		})
		for _, c := range scored {
			out = append(out, Arc{Ring: c.ring, Start: c.start, Size: size})
		}
		// The rest of this size, each touching a held device.
		for r, ring := range l.rings {
			n := len(ring)
			if size > n {
				continue
			}
			starts := n
			if size == n {
				starts = 1
			}
			for start := 0; start < starts; start++ {
				if !l.arcFree(free, r, start, size) {
					out = append(out, Arc{Ring: r, Start: start, Size: size})
				}
			}
		}
	}
	return out
}

// arcCount is len(l.Arcs()).
func (l *Layout) arcCount() int {
	c := 0
	for _, ring := range l.rings {
		n := len(ring)
		c += n*(n-1) + 1
	}
	return c
}

// arcFree reports whether every position of the arc is free.
func (l *Layout) arcFree(free []bool, r, start, size int) bool {
	n := len(l.rings[r])
	base := l.offset[r]
	for i := 0; i < size; i++ {
		if !free[base+(start+i)%n] {
			return false
		}
	}
	return true
}

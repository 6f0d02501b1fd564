package alloc

import (
	"cmp"
	"math/bits"
	"slices"
	"sort"
)

// segment is a maximal run of free positions on one ring.
type segment struct {
	ring, start, length int
	full                bool // the whole ring is free; the run has no ends
}

// ringStats summarises the free segments of one ring.
type ringStats struct {
	segs              []segment
	largest, largestI int // longest segment and its index in segs (-1 when none)
	second            int // longest segment other than segs[largestI]
	capacity          int // sum of pow2Capacity over segs
}

// pow2Capacity is how many arcs of each power-of-two size a free segment of
// the given length holds, summed over the sizes: 8 → 8+4+2+1 = 15,
// 7 → 7+3+1 = 11, 4+3 → 7+4 = 11, 2+2+2+1 → 3+3+3+1 = 10. It rewards free
// space left in power-of-two shapes, the way a buddy allocator keeps it.
func pow2Capacity(length int) int {
	c := 0
	for k := 1; k <= length; k <<= 1 {
		c += length / k
	}
	return c
}

func (l *Layout) stats(free []bool) []ringStats {
	st := make([]ringStats, len(l.rings))
	// One backing array for every ring's segments; maxSegs bounds it, so
	// it never grows.
	all := make([]segment, 0, l.maxSegs)
	for r, ring := range l.rings {
		s := &st[r]
		s.largestI = -1
		n := len(ring)
		begin := len(all)
		forEachSegment(free[l.offset[r]:l.offset[r]+n], func(start, length int) {
			all = append(all, segment{ring: r, start: start, length: length, full: length == n})
			s.capacity += pow2Capacity(length)
			switch {
			case length > s.largest:
				s.second = s.largest
				s.largest, s.largestI = length, len(all)-1-begin
			case length > s.second:
				s.second = length
			}
		})
		s.segs = all[begin:len(all):len(all)]
	}
	return st
}

// score ranks a candidate arc by what it leaves behind on the node. Better
// is, in this order: more power-of-two arcs left (pow2Capacity summed over
// the node), then the longest free arc left, then fewer free segments, then
// a start aligned to the smallest power of two that holds the request, then
// the lowest ring, then the lowest position. The fragmentation lab (lab/sim,
// lab/notebooks/sim.md) measured this order against the alternatives.
type score struct {
	capacity      int
	largest, segs int
	aligned       bool
	ring, start   int
}

func (a score) better(b score) bool {
	if a.capacity != b.capacity {
		return a.capacity > b.capacity
	}
	if a.largest != b.largest {
		return a.largest > b.largest
	}
	if a.segs != b.segs {
		return a.segs < b.segs
	}
	if a.aligned != b.aligned {
		return a.aligned
	}
	if a.ring != b.ring {
		return a.ring < b.ring
	}
	return a.start < b.start
}

// Preferred picks size devices out of available that include every ID of
// mustInclude, for a kubelet GetPreferredAllocation request.
//
// It considers every arc of size consecutive ring positions on one ring
// (wrap-around arcs count; an arc may be a whole ring) whose devices are all
// available and which covers mustInclude, and returns the one that leaves
// the node best able to serve later requests: most power-of-two arcs left,
// then longest free arc, then fewest free segments, then power-of-two
// alignment, then lowest ring and position (see score). The IDs come in
// ring order starting at the arc's first position: lpu7, lpu0, lpu1 for the
// wrap-around arc 7-0-1.
//
// It never fails. When no arc qualifies it returns size available IDs
// covering mustInclude that form the fewest ring segments, on one ring when
// any ring holds enough of them. It returns nil when size is not positive,
// size exceeds the number of available devices, mustInclude holds more than
// size devices, or a mustInclude ID is not available. Unknown IDs are
// ignored; unhealthy devices are simply absent from available.
func (l *Layout) Preferred(available, mustInclude []string, size int) []string {
	ids, _ := l.PreferredArc(available, mustInclude, size)
	return ids
}

// PreferredArc is Preferred that also says whether its answer is one
// ring-contiguous arc, which it knows for free, so a caller that only wants
// to log a fragmented answer need not run Check on every request.
func (l *Layout) PreferredArc(available, mustInclude []string, size int) (ids []string, contiguous bool) {
	if size <= 0 {
		return nil, false
	}
	free, nfree := l.freeMask(available)
	if size > nfree {
		return nil, false
	}
	var must []loc
	mustRing := -1 // ring holding every must-include, -2 when they span rings
	seen := make(map[string]bool, len(mustInclude))
	for _, id := range mustInclude {
		lc, ok := l.loc[id]
		if !ok || seen[id] {
			continue
		}
		seen[id] = true
		if !free[l.offset[lc.ring]+lc.pos] {
			return nil, false
		}
		must = append(must, lc)
		switch mustRing {
		case -1:
			mustRing = lc.ring
		case lc.ring:
		default:
			mustRing = -2
		}
	}
	if len(must) > size {
		return nil, false
	}

	st := l.stats(free)
	if mustRing != -2 {
		if r, start, ok := l.bestArc(st, must, mustRing, size); ok {
			ring := l.rings[r]
			out := make([]string, size)
			for i := range out {
				out[i] = ring[(start+i)%len(ring)]
			}
			return out, true
		}
	}
	// bestArc considers every arc, so a fallback answer is never one.
	return l.fallback(st, free, must, mustRing, size), false
}

// bestArc scores every candidate arc exactly and returns the best one's ring
// and start. Removing an arc only changes its own segment, so each candidate
// is scored in constant time from the per-ring summaries.
func (l *Layout) bestArc(st []ringStats, must []loc, mustRing, size int) (int, int, bool) {
	a := newArcSearch(st, must, size)
	l.search(a, st, mustRing)
	return a.best.ring, a.best.start, a.found
}

// eachArc calls each with the score of every candidate arc bestArc
// considers, in no particular order (ArcOrder sorts them).
func (l *Layout) eachArc(st []ringStats, must []loc, mustRing, size int, each func(score)) {
	a := newArcSearch(st, must, size)
	a.each = each
	l.search(a, st, mustRing)
}

// search offers every candidate arc to a.
func (l *Layout) search(a *arcSearch, st []ringStats, mustRing int) {
	size := a.size
	for r := range st {
		n := len(l.rings[r])
		if n < size || (mustRing >= 0 && r != mustRing) {
			continue
		}
		s := &st[r]
		otherRings := a.top1
		if r == a.top1Ring {
			otherRings = a.top2
		}
		for i, sg := range s.segs {
			if sg.length < size {
				continue
			}
			if sg.full {
				a.fullRing(r, n, otherRings)
				continue
			}
			ringRest := s.largest // longest segment on this ring other than sg
			if i == s.largestI {
				ringRest = s.second
			}
			a.inSegment(r, n, sg, max(otherRings, ringRest))
		}
	}
}

// arcSearch is bestArc's state: the node's totals every score starts
// from, and the best candidate so far.
type arcSearch struct {
	must                []loc
	size, align         int
	totalSegs, totalCap int
	top1, top1Ring      int // longest segment over rings, and its ring
	top2                int // longest segment on any other ring
	best                score
	found               bool
	each                func(score) // when set, sees every candidate (eachArc)
}

func newArcSearch(st []ringStats, must []loc, size int) *arcSearch {
	a := &arcSearch{must: must, size: size, top1Ring: -1,
		align: 1 << bits.Len(uint(size-1))} // smallest power of two ≥ size
	for r := range st {
		a.totalSegs += len(st[r].segs)
		a.totalCap += st[r].capacity
		switch v := st[r].largest; {
		case v > a.top1:
			a.top2 = a.top1
			a.top1, a.top1Ring = v, r
		case v > a.top2:
			a.top2 = v
		}
	}
	return a
}

func (a *arcSearch) consider(c score) {
	if a.each != nil {
		a.each(c)
	}
	if !a.found || c.better(a.best) {
		a.best, a.found = c, true
	}
}

// covers reports whether the arc at start on a ring of n holds every
// must-include.
func (a *arcSearch) covers(n, start int) bool {
	for _, m := range a.must {
		if (m.pos-start+n)%n >= a.size {
			return false
		}
	}
	return true
}

// fullRing scores every arc of ring r, all of whose n positions are free.
func (a *arcSearch) fullRing(r, n, otherRings int) {
	rest, restSegs := n-a.size, 1
	if rest == 0 {
		restSegs = 0
	}
	capacity := a.totalCap - pow2Capacity(n) + pow2Capacity(rest)
	starts := n
	if a.size == n {
		starts = 1 // every start gives the same set; position 0 wins
	}
	for start := 0; start < starts; start++ {
		if !a.covers(n, start) {
			continue
		}
		a.consider(score{
			capacity: capacity,
			largest:  max(otherRings, rest),
			segs:     a.totalSegs - 1 + restSegs,
			aligned:  start%a.align == 0,
			ring:     r,
			start:    start,
		})
	}
}

// inSegment scores every arc inside segment sg of ring r; others is the
// longest segment that the arc leaves untouched.
func (a *arcSearch) inSegment(r, n int, sg segment, others int) {
	segCap := a.totalCap - pow2Capacity(sg.length)
	for off := 0; off+a.size <= sg.length; off++ {
		start := (sg.start + off) % n
		if !a.covers(n, start) {
			continue
		}
		left, right := off, sg.length-a.size-off
		segs := a.totalSegs - 1
		if left > 0 {
			segs++
		}
		if right > 0 {
			segs++
		}
		a.consider(score{
			capacity: segCap + pow2Capacity(left) + pow2Capacity(right),
			largest:  max(others, left, right),
			segs:     segs,
			aligned:  start%a.align == 0,
			ring:     r,
			start:    start,
		})
	}
}

// fallback picks size free positions covering must with the fewest
// segments when no single arc qualifies: on one ring when any ring holds
// every must-include and enough free devices, else over the whole node.
func (l *Layout) fallback(st []ringStats, free []bool, must []loc, mustRing, size int) []string {
	bestRing, bestPieces := -1, 0
	var bestSel []loc
	for r := range st {
		if mustRing == -2 || (mustRing >= 0 && r != mustRing) {
			continue
		}
		cnt := 0
		for _, sg := range st[r].segs {
			cnt += sg.length
		}
		if cnt < size {
			continue
		}
		sel := l.fewestSegments(st[r].segs, must, size)
		if bestRing < 0 {
			bestRing, bestSel = r, sel // pieces only matter once a second ring competes
			continue
		}
		if bestPieces == 0 {
			bestPieces = l.pieces(bestSel)
		}
		if p := l.pieces(sel); p < bestPieces {
			bestRing, bestPieces, bestSel = r, p, sel
		}
	}
	if bestRing < 0 {
		var all []segment
		for r := range st {
			all = append(all, st[r].segs...)
		}
		bestSel = l.fewestSegments(all, must, size)
	}
	return l.ordered(bestSel)
}

// fewestSegments chooses size positions from segs that cover must with as
// few runs as possible. The caller guarantees that segs hold at least size
// positions, every must position lies in one of them, and len(must) ≤ size.
func (l *Layout) fewestSegments(segs []segment, must []loc, size int) []loc {
	mand, rest := l.mustPieces(segs, must)
	used := trimGaps(mand, size)
	used = growPieces(mand, used, size)
	var sel []loc
	for _, w := range mand {
		n := len(l.rings[w.seg.ring])
		for o, c := range w.chosen {
			if c {
				sel = append(sel, loc{ring: w.seg.ring, pos: (w.seg.start + o) % n})
			}
		}
	}
	return l.fillFrom(sel, rest, size-used)
}

// piece is a segment holding must-includes, and the positions chosen in it.
type piece struct {
	seg    segment
	offs   []int  // must offsets from the (rotated) segment start, ascending
	chosen []bool // per offset
}

// mustPieces splits segs into those holding must-includes, each with the
// span from its first to its last must-include chosen, and the rest.
func (l *Layout) mustPieces(segs []segment, must []loc) (mand []*piece, rest []segment) {
	for _, sg := range segs {
		n := len(l.rings[sg.ring])
		var offs []int
		for _, m := range must {
			if m.ring != sg.ring {
				continue
			}
			if off := (m.pos - sg.start + n) % n; off < sg.length {
				offs = append(offs, off)
			}
		}
		if len(offs) == 0 {
			rest = append(rest, sg)
			continue
		}
		sort.Ints(offs)
		if sg.full {
			sg = rotateAtWidestGap(sg, offs, n)
		}
		w := &piece{seg: sg, offs: offs, chosen: make([]bool, sg.length)}
		for o := offs[0]; o <= offs[len(offs)-1]; o++ {
			w.chosen[o] = true
		}
		mand = append(mand, w)
	}
	return mand, rest
}

// rotateAtWidestGap: a free ring has no ends, so start it right after the
// widest gap between must-includes, keeping their span as short as
// possible. It rewrites offs (sorted) for the new start.
func rotateAtWidestGap(sg segment, offs []int, n int) segment {
	gapAt, gap := 0, -1
	for i := range offs {
		g := (offs[(i+1)%len(offs)] - offs[i] - 1 + n) % n
		if g > gap {
			gap, gapAt = g, (i+1)%len(offs)
		}
	}
	shift := offs[gapAt]
	sg.start = (sg.start + shift) % n
	for i := range offs {
		offs[i] = (offs[i] - shift + n) % n
	}
	sort.Ints(offs)
	return sg
}

// trimGaps spans every must-include group; when that is more than size,
// it leaves out the widest gaps between must-includes first (fewest extra
// pieces). It returns the positions chosen.
func trimGaps(mand []*piece, size int) int {
	type gap struct{ w, from, length int }
	used := 0
	var gaps []gap
	for wi, w := range mand {
		used += w.offs[len(w.offs)-1] - w.offs[0] + 1
		for i := 1; i < len(w.offs); i++ {
			if g := w.offs[i] - w.offs[i-1] - 1; g > 0 {
				gaps = append(gaps, gap{w: wi, from: w.offs[i-1] + 1, length: g})
			}
		}
	}
	sort.SliceStable(gaps, func(i, j int) bool { return gaps[i].length > gaps[j].length })
	for _, g := range gaps {
		if used <= size {
			break
		}
		for o := g.from; o < g.from+g.length; o++ {
			mand[g.w].chosen[o] = false
		}
		used -= g.length
	}
	return used
}

// growPieces grows the must-include pieces inside their own segments up
// to size positions in all: that never adds a piece. It returns the
// positions chosen.
func growPieces(mand []*piece, used, size int) int {
	for _, w := range mand {
		for o := 1; o < len(w.chosen) && used < size; o++ {
			if !w.chosen[o] && w.chosen[o-1] {
				w.chosen[o] = true
				used++
			}
		}
		for o := len(w.chosen) - 2; o >= 0 && used < size; o-- {
			if !w.chosen[o] && w.chosen[o+1] {
				w.chosen[o] = true
				used++
			}
		}
	}
	return used
}

// fillFrom adds need positions to sel from whole free segments, longest
// first; the last one is the shortest segment that still covers what is
// missing (best fit).
func (l *Layout) fillFrom(sel []loc, rest []segment, need int) []loc {
	if need <= 0 {
		return sel
	}
	slices.SortFunc(rest, func(a, b segment) int {
		return cmp.Or(cmp.Compare(b.length, a.length), cmp.Compare(a.ring, b.ring), cmp.Compare(a.start, b.start))
	})
	take := func(sg segment, k int) {
		n := len(l.rings[sg.ring])
		for o := 0; o < k; o++ {
			sel = append(sel, loc{ring: sg.ring, pos: (sg.start + o) % n})
		}
	}
	for i := 0; i < len(rest) && need > 0; i++ {
		if rest[i].length >= need {
			last := i
			for j := i + 1; j < len(rest) && rest[j].length >= need; j++ {
				last = j // rest is sorted longest first: the later, the snugger
			}
			take(rest[last], need)
			break
		}
		take(rest[i], rest[i].length)
		need -= rest[i].length
	}
	return sel
}

// sortLocs orders sel by ring, then position.
func sortLocs(sel []loc) {
	slices.SortFunc(sel, func(a, b loc) int {
		return cmp.Or(cmp.Compare(a.ring, b.ring), cmp.Compare(a.pos, b.pos))
	})
}

// ringGroups calls fn for each ring's part of sel, which sortLocs ordered.
func ringGroups(sel []loc, fn func(ring int, part []loc)) {
	for i := 0; i < len(sel); {
		j := i + 1
		for j < len(sel) && sel[j].ring == sel[i].ring {
			j++
		}
		fn(sel[i].ring, sel[i:j])
		i = j
	}
}

// arcOrder returns where the ring order of part starts and how many runs
// (maximal sets of consecutive positions) part forms. part holds distinct
// positions of one ring of length n, sorted by position (sortLocs). The
// order starts right after the largest gap, the lowest start winning ties,
// so a contiguous arc starts at its first position; a full ring starts at
// 0 and is one run.
func arcOrder(part []loc, n int) (start, runs int) {
	k := len(part)
	if k == n {
		return 0, 1
	}
	bestGap := -1
	for i := range part {
		next := (i + 1) % k
		gap := (part[next].pos - part[i].pos - 1 + n) % n // positions between part[i] and the next
		if gap > 0 {
			runs++
		}
		if gap > bestGap || (gap == bestGap && part[next].pos < part[start].pos) {
			bestGap, start = gap, next
		}
	}
	return start, runs
}

// appendArc appends the IDs of ring r at the positions of part, in ring
// order from part[start].
func (l *Layout) appendArc(out []string, r int, part []loc, start int) []string {
	for i := range part {
		out = append(out, l.rings[r][part[(start+i)%len(part)].pos])
	}
	return out
}

// pieces counts the ring segments a selection forms. It sorts sel.
func (l *Layout) pieces(sel []loc) int {
	sortLocs(sel)
	total := 0
	ringGroups(sel, func(r int, part []loc) {
		_, runs := arcOrder(part, len(l.rings[r]))
		total += runs
	})
	return total
}

// ordered returns the IDs of sel by ring, each ring's part in ring order
// starting after its largest gap (the lowest start wins ties), as Check
// orders them. It sorts sel.
func (l *Layout) ordered(sel []loc) []string {
	sortLocs(sel)
	out := make([]string, 0, len(sel))
	ringGroups(sel, func(r int, part []loc) {
		start, _ := arcOrder(part, len(l.rings[r]))
		out = l.appendArc(out, r, part, start)
	})
	return out
}

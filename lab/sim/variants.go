package main

import (
	"math/bits"
	"slices"
	"strings"

	"github.com/hyperaccel/lpu-node/lab/churn"
	"github.com/hyperaccel/lpu-node/pkg/alloc"
)

// The ablation: orders of scoring criteria, each scored by brute force over
// every candidate arc. They are how the pkg/alloc order (CLSAP) was chosen
// from the starting order (LSAP); they are not product code.

// arcState is a node after a candidate arc was taken.
type arcState struct {
	free        [][]bool // per ring
	ring, start int
	size        int
	segLen      int // length of the free segment the arc was cut from
}

// segments lists the free segment lengths of every ring.
func (s arcState) segments() []int {
	var out []int
	for _, ring := range s.free {
		n := len(ring)
		b := slices.Index(ring, false)
		if b < 0 {
			out = append(out, n)
			continue
		}
		run := 0
		for k := 1; k <= n; k++ {
			if ring[(b+k)%n] {
				run++
			} else if run > 0 {
				out = append(out, run)
				run = 0
			}
		}
	}
	return out
}

// criterion returns keys; lower is better, compared lexicographically.
type criterion struct {
	name string
	key  func(s arcState) []int
}

var (
	critLargest = criterion{"L", func(s arcState) []int {
		m := 0
		for _, l := range s.segments() {
			m = max(m, l)
		}
		return []int{-m}
	}}
	critSegs  = criterion{"S", func(s arcState) []int { return []int{len(s.segments())} }}
	critAlign = criterion{"A", func(s arcState) []int {
		if s.start%(1<<bits.Len(uint(s.size-1))) == 0 {
			return []int{0}
		}
		return []int{1}
	}}
	critPos    = criterion{"P", func(s arcState) []int { return []int{s.ring, s.start} }}
	critVector = criterion{"V", func(s arcState) []int {
		seg := s.segments()
		slices.Sort(seg)
		slices.Reverse(seg)
		out := make([]int, 0, 64)
		for _, l := range seg {
			out = append(out, -l)
		}
		for len(out) < 64 {
			out = append(out, 0)
		}
		return out
	}}
	critBestFit = criterion{"B", func(s arcState) []int { return []int{s.segLen} }}
	// critCapacity counts disjoint free arcs of each power-of-two size.
	critCapacity = criterion{"C", func(s arcState) []int {
		c := 0
		for _, l := range s.segments() {
			for k := 1; k <= l; k *= 2 {
				c += l / k
			}
		}
		return []int{-c}
	}}
)

// critArea is the free area each power-of-two size could still use:
// Σ over sizes k of k × (arcs of k that fit).
var critArea = criterion{"W", func(s arcState) []int {
	c := 0
	for _, l := range s.segments() {
		for k := 1; k <= l; k *= 2 {
			c += k * (l / k)
		}
	}
	return []int{-c}
}}

// critTime is filled in per variant (it needs the oracle view); this is
// its name holder.
var critTime = criterion{name: "T"}

// variant is pkg/alloc's candidate set with another scoring order.
type variant struct {
	node  Node
	l     *alloc.Layout // fallback when no arc fits
	crits []criterion
	fb    []criterion // non-nil: brute-force fallback over every set, ordered by pieces then these (nodes ≤ 12 LPUs)
	// timed variants are oracles: see the end times (critTime).
	ends *oracleView
}

// oracleView is what an oracle variant was told before its pick.
type oracleView struct {
	jobEnd float64
	endAt  []float64
}

// See implements oracle; it is a no-op for variants without critTime.
func (v variant) See(jobEnd float64, endAt []float64) {
	if v.ends != nil {
		v.ends.jobEnd, v.ends.endAt = jobEnd, endAt
	}
}

// Variants returns the ablation policies.
func Variants(node Node, mix churn.Mix, l *alloc.Layout) []Policy {
	orders := [][]criterion{
		{critLargest, critSegs, critAlign, critPos}, // the starting order
		{critLargest, critSegs, critPos},
		{critLargest, critAlign, critPos},
		{critSegs, critLargest, critAlign, critPos},
		{critAlign, critLargest, critSegs, critPos},
		{critVector, critAlign, critPos},
		{critBestFit, critLargest, critSegs, critAlign, critPos},
		{critLargest, critSegs, critBestFit, critAlign, critPos},
		{critCapacity, critLargest, critSegs, critAlign, critPos}, // pkg/alloc today, by brute force
		{critLargest, critCapacity, critSegs, critAlign, critPos},
		{critLargest, critSegs, critCapacity, critAlign, critPos},
		{critArea, critLargest, critSegs, critAlign, critPos},
		{critCapacity, critLargest, critSegs, critPos},
	}
	// M knows the mix (a plugin could learn it from the sizes it is asked
	// for): arcs each request size could still get, weighted by the mix.
	critMix := criterion{"M", func(s arcState) []int {
		c := 0
		for _, l := range s.segments() {
			for i, k := range mix.Sizes {
				c += mix.Weights[i] * (l / k)
			}
		}
		return []int{-c}
	}}
	orders = append(orders,
		[]criterion{critMix, critLargest, critSegs, critAlign, critPos},
		[]criterion{critCapacity, critMix, critLargest, critSegs, critAlign, critPos},
	)
	var out []Policy
	for _, o := range orders {
		out = append(out, variant{node: node, l: l, crits: o})
	}
	// Oracles: T orders by how close the arc's busy neighbours end to the
	// new job's end, so jobs that leave together sit together.
	for _, o := range [][]criterion{
		{critCapacity, critLargest, critSegs, critTime, critAlign, critPos},
		{critTime, critCapacity, critLargest, critSegs, critAlign, critPos},
	} {
		out = append(out, variant{node: node, l: l, crits: o, ends: &oracleView{}})
	}
	if node.Capacity() <= 12 {
		base := []criterion{critLargest, critSegs, critAlign, critPos}
		out = append(out,
			variant{node: node, l: l, crits: base, fb: []criterion{critLargest, critSegs}},
			variant{node: node, l: l, crits: base, fb: []criterion{critCapacity, critLargest, critSegs}},
			variant{node: node, l: l, crits: []criterion{critCapacity, critLargest, critSegs, critAlign, critPos}, fb: []criterion{critCapacity, critLargest, critSegs}},
		)
	}
	return out
}

func (v variant) Name() string {
	names := make([]string, len(v.crits))
	for i, c := range v.crits {
		names[i] = c.name
	}
	name := "v:" + strings.Join(names, "")
	if v.fb != nil {
		name += "+F"
		for _, c := range v.fb {
			name += c.name
		}
	}
	return name
}

func (v variant) Pick(available []string, size int) []string {
	if size > len(available) {
		return nil
	}
	free := v.freeByRing(available)
	var best []int
	var bestIDs []string
	for r, ring := range v.node.Rings {
		n := len(ring)
		if size > n {
			continue
		}
		starts := n
		if size == n {
			starts = 1
		}
		for s := 0; s < starts; s++ {
			key, ok := v.arcKey(free, r, s, size)
			if ok && (bestIDs == nil || slices.Compare(key, best) < 0) {
				best = key
				bestIDs = make([]string, size)
				for i := range bestIDs {
					bestIDs[i] = ring[(s+i)%n]
				}
			}
		}
	}
	if bestIDs != nil {
		return bestIDs
	}
	if v.fb != nil {
		return v.bruteFallback(free, size)
	}
	return v.l.Preferred(available, nil, size)
}

// freeByRing says for each position of each ring whether its LPU is in
// available.
func (v variant) freeByRing(available []string) [][]bool {
	avail := make(map[string]bool, len(available))
	for _, id := range available {
		avail[id] = true
	}
	free := make([][]bool, len(v.node.Rings))
	for r, ring := range v.node.Rings {
		free[r] = make([]bool, len(ring))
		for i, id := range ring {
			free[r][i] = avail[id]
		}
	}
	return free
}

// arcKey is v's sort key of the size-arc at start s of ring r (lower is
// better); false when an LPU of the arc is not free.
func (v variant) arcKey(free [][]bool, r, s, size int) ([]int, bool) {
	n := len(free[r])
	for i := 0; i < size; i++ {
		if !free[r][(s+i)%n] {
			return nil, false
		}
	}
	// The free segment the arc sits in.
	segLen := size
	for i := size; i < n && free[r][(s+i)%n]; i++ {
		segLen++
	}
	fwd := segLen
	for i := 1; i <= n-fwd && free[r][(s-i+n)%n]; i++ {
		segLen++
	}
	st := arcState{free: make([][]bool, len(free)), ring: r, start: s, size: size, segLen: segLen}
	copy(st.free, free)
	st.free[r] = slices.Clone(free[r])
	for i := 0; i < size; i++ {
		st.free[r][(s+i)%n] = false
	}
	var key []int
	for _, c := range v.crits {
		if c.name == critTime.name {
			key = append(key, v.timeKey(free, r, s, size))
			continue
		}
		key = append(key, c.key(st)...)
	}
	return key, true
}

// bruteFallback tries every set of size free devices: fewest pieces first,
// then v.fb on what is left.
func (v variant) bruteFallback(free [][]bool, size int) []string {
	type slot struct{ r, i int }
	var slots []slot
	for r, ring := range free {
		for i, f := range ring {
			if f {
				slots = append(slots, slot{r, i})
			}
		}
	}
	var best []int
	var bestIDs []string
	for sub := uint32(0); sub < 1<<len(slots); sub++ {
		if bits.OnesCount32(sub) != size {
			continue
		}
		st := arcState{free: make([][]bool, len(free)), size: size}
		taken := make([][]bool, len(free))
		for r := range free {
			st.free[r] = slices.Clone(free[r])
			taken[r] = make([]bool, len(free[r]))
		}
		var ids []string
		for k, sl := range slots {
			if sub&(1<<k) != 0 {
				st.free[sl.r][sl.i] = false
				taken[sl.r][sl.i] = true
				ids = append(ids, v.node.Rings[sl.r][sl.i])
			}
		}
		pieces := len(arcState{free: taken}.segments())
		key := []int{pieces}
		for _, c := range v.fb {
			key = append(key, c.key(st)...)
		}
		if bestIDs == nil || slices.Compare(key, best) < 0 {
			best, bestIDs = key, ids
		}
	}
	return bestIDs
}

// timeKey sums, over the two LPUs just outside the arc, how far apart (in
// milli-lifetimes) the job there ends from the new job; a free neighbour
// counts as a full lifetime apart.
func (v variant) timeKey(free [][]bool, r, start, size int) int {
	ring := v.node.Rings[r]
	n := len(ring)
	off := 0
	for _, rr := range v.node.Rings[:r] {
		off += len(rr)
	}
	sum := 0.0
	for _, nb := range []int{(start - 1 + n) % n, (start + size) % n} {
		if size == n {
			break
		}
		if free[r][nb] {
			sum++
			continue
		}
		d := v.ends.endAt[off+nb] - v.ends.jobEnd
		if d < 0 {
			d = -d
		}
		sum += min(d, 1)
	}
	return int(sum * 1000)
}

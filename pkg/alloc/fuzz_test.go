package alloc

import (
	"fmt"
	"math/bits"
	"reflect"
	"slices"
	"testing"
)

// fuzzLayout builds up to 4 rings, each 1–16 long, from lens; IDs are
// numbered over all rings so that position i of the flat layout is lpu<i>.
func fuzzLayout(lens []byte) [][]string {
	if len(lens) == 0 {
		lens = []byte{7}
	}
	if len(lens) > 4 {
		lens = lens[:4]
	}
	var rings [][]string
	next := 0
	for _, b := range lens {
		n := int(b%16) + 1
		rings = append(rings, span(next, next+n))
		next += n
	}
	return rings
}

func maskIDs(mask uint64, total int) []string {
	var out []string
	for i := 0; i < total; i++ {
		if mask&(1<<i) != 0 {
			out = append(out, fmt.Sprintf("lpu%d", i))
		}
	}
	return out
}

// bruteBest scores every candidate arc from scratch, independently of
// Preferred's incremental scoring, and returns the IDs of the best one.
func bruteBest(rings [][]string, free map[string]bool, must []string, size int) []string {
	var best score
	var bestIDs []string
	for r, ring := range rings {
		n := len(ring)
		if size > n {
			continue
		}
		for start := 0; start < n; start++ {
			arc := make([]string, size)
			ok := true
			for i := range arc {
				arc[i] = ring[(start+i)%n]
				if !free[arc[i]] {
					ok = false
				}
			}
			for _, m := range must {
				if !slices.Contains(arc, m) {
					ok = false
				}
			}
			if !ok {
				continue
			}
			left := map[string]bool{}
			for id := range free {
				if !slices.Contains(arc, id) {
					left[id] = true
				}
			}
			capacity, largest, segs := 0, 0, 0
			for _, rg := range rings {
				mask := make([]bool, len(rg))
				for i, id := range rg {
					mask[i] = left[id]
				}
				forEachSegment(mask, func(_, length int) {
					segs++
					largest = max(largest, length)
					for k := 1; k <= length; k *= 2 {
						capacity += length / k
					}
				})
			}
			align := 1 << bits.Len(uint(size-1))
			c := score{capacity: capacity, largest: largest, segs: segs, aligned: start%align == 0, ring: r, start: start}
			if bestIDs == nil || c.better(best) {
				best, bestIDs = c, arc
			}
		}
	}
	return bestIDs
}

// bruteFewestPieces is the fewest ring segments any valid answer can form,
// over one-ring sets when onlyOneRing, by trying every subset of flat
// positions (callers keep the layout small).
func bruteFewestPieces(l *Layout, freeFlat []string, must []string, size int, onlyOneRing bool) int {
	best := -1
	for sub := uint64(0); sub < 1<<len(freeFlat); sub++ {
		if bits.OnesCount64(sub) != size {
			continue
		}
		var set []string
		for i, id := range freeFlat {
			if sub&(1<<i) != 0 {
				set = append(set, id)
			}
		}
		covers := true
		for _, m := range must {
			if !slices.Contains(set, m) {
				covers = false
			}
		}
		if !covers {
			continue
		}
		p, _ := l.Check(set)
		if onlyOneRing && p.Ring < 0 {
			continue
		}
		var sel []loc
		for _, id := range set {
			sel = append(sel, l.loc[id])
		}
		if pc := l.pieces(sel); best < 0 || pc < best {
			best = pc
		}
	}
	return best
}

func FuzzPreferred(f *testing.F) {
	f.Add([]byte{7}, uint64(0xff), uint64(0), uint8(3))
	f.Add([]byte{7}, uint64(0b11011011), uint64(0b1000), uint8(3))
	f.Add([]byte{7, 7}, uint64(0xff33), uint64(0x0101), uint8(4))
	f.Add([]byte{3, 15, 0}, uint64(0xfffff), uint64(1<<5), uint8(9))
	f.Add([]byte{7}, uint64(0b10111011), uint64(0), uint8(5))
	f.Fuzz(func(t *testing.T, lens []byte, availMask, mustMask uint64, size8 uint8) {
		rings := fuzzLayout(lens)
		l := mustLayout(t, rings)
		total := l.total
		size := int(size8 % 20)
		available := maskIDs(availMask, total)
		must := maskIDs(mustMask, total)
		// Half the time keep must-include inside available, as kubelet does.
		if size8&0x80 != 0 {
			must = maskIDs(mustMask&availMask, total)
		}
		// Unknown IDs must be ignored.
		available = append(available, "lpu999")

		got := l.Preferred(available, must, size)

		free := map[string]bool{}
		for _, id := range available[:len(available)-1] {
			free[id] = true
		}
		mustOK := len(must) <= size
		for _, m := range must {
			if !free[m] {
				mustOK = false
			}
		}
		possible := size > 0 && size <= len(free) && mustOK
		if !possible {
			if got != nil {
				t.Fatalf("Preferred(%v, %v, %d) = %v, want nil", available, must, size, got)
			}
			return
		}
		if len(got) != size {
			t.Fatalf("Preferred(%v, %v, %d) = %v: len %d, want %d", available, must, size, got, len(got), size)
		}
		seen := map[string]bool{}
		for _, id := range got {
			if !free[id] {
				t.Fatalf("result %v holds %s, not available", got, id)
			}
			if seen[id] {
				t.Fatalf("result %v holds %s twice", got, id)
			}
			seen[id] = true
		}
		for _, m := range must {
			if !seen[m] {
				t.Fatalf("result %v misses must-include %s", got, m)
			}
		}
		p, err := l.Check(got)
		if err != nil {
			t.Fatalf("Check(%v): %v", got, err)
		}
		if !reflect.DeepEqual(p.IDs, got) {
			t.Fatalf("result %v is not in ring order from its start: Check orders it %v", got, p.IDs)
		}
		if ids, contiguous := l.PreferredArc(available, must, size); !reflect.DeepEqual(ids, got) || contiguous != p.Contiguous {
			t.Fatalf("PreferredArc(%v, %v, %d) = %v, %v; Preferred gave %v, Check says contiguous=%v",
				available, must, size, ids, contiguous, got, p.Contiguous)
		}

		if want := bruteBest(rings, free, must, size); want != nil {
			if !p.Contiguous {
				t.Fatalf("Preferred(%v, %v, %d) = %v, not contiguous (%s), but arc %v exists",
					available, must, size, got, p.Reason, want)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("Preferred(%v, %v, %d) = %v, exhaustive scoring picks %v", available, must, size, got, want)
			}
			return
		}

		oneRing := false
		for _, ring := range rings {
			cnt := 0
			for _, id := range ring {
				if free[id] {
					cnt++
				}
			}
			holds := cnt >= size
			for _, m := range must {
				if !slices.Contains(ring, m) {
					holds = false
				}
			}
			oneRing = oneRing || holds
		}
		if oneRing && p.Ring < 0 {
			t.Fatalf("Preferred(%v, %v, %d) = %v spans rings (%s) though one ring holds it", available, must, size, got, p.Reason)
		}
		if len(free) <= 14 {
			freeFlat := make([]string, 0, len(free))
			for _, ring := range rings {
				for _, id := range ring {
					if free[id] {
						freeFlat = append(freeFlat, id)
					}
				}
			}
			sel := make([]loc, len(got))
			for i, id := range got {
				sel[i] = l.loc[id]
			}
			if want, have := bruteFewestPieces(l, freeFlat, must, size, oneRing), l.pieces(sel); have != want {
				t.Fatalf("Preferred(%v, %v, %d) = %v forms %d segments, fewest possible is %d", available, must, size, got, have, want)
			}
		}
	})
}

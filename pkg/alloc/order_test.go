package alloc

import (
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestArcs(t *testing.T) {
	tests := map[string]struct {
		rings [][]string
		want  int
	}{
		"ring of 1":      {rings: [][]string{{"lpu0"}}, want: 1},
		"ring of 2":      {rings: [][]string{span(0, 2)}, want: 3},
		"ring of 8":      {rings: oneRing8, want: 57},
		"two rings of 8": {rings: twoRings8, want: 114},
		"ring of 16":     {rings: [][]string{span(0, 16)}, want: 241},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			l := mustLayout(t, tc.rings)
			arcs := l.Arcs()
			if len(arcs) != tc.want || l.arcCount() != tc.want {
				t.Fatalf("len(Arcs()) = %d, arcCount = %d, want %d", len(arcs), l.arcCount(), tc.want)
			}
			seen := map[string]bool{}
			for _, a := range arcs {
				ids := l.ArcIDs(a)
				if len(ids) != a.Size {
					t.Fatalf("ArcIDs(%+v) = %v", a, ids)
				}
				key := setKey(ids)
				if seen[key] {
					t.Fatalf("arc %+v covers the same devices as an earlier arc: %v", a, ids)
				}
				seen[key] = true
			}
		})
	}
}

func TestArcIDs(t *testing.T) {
	l := mustLayout(t, twoRings8)
	tests := map[string]struct {
		arc  Arc
		want []string
	}{
		"first":       {arc: Arc{Ring: 0, Start: 0, Size: 2}, want: ids(0, 1)},
		"wraps":       {arc: Arc{Ring: 0, Start: 6, Size: 4}, want: ids(6, 7, 0, 1)},
		"second ring": {arc: Arc{Ring: 1, Start: 7, Size: 2}, want: ids(15, 8)},
		"no ring":     {arc: Arc{Ring: 2, Start: 0, Size: 1}},
		"too long":    {arc: Arc{Ring: 0, Start: 0, Size: 9}},
		"bad start":   {arc: Arc{Ring: 0, Start: 8, Size: 1}},
		"empty":       {arc: Arc{Ring: 0, Start: 0, Size: 0}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := l.ArcIDs(tc.arc); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("ArcIDs(%+v) = %v, want %v", tc.arc, got, tc.want)
			}
		})
	}
}

// setKey is an order-free key for a set of IDs.
func setKey(ids []string) string {
	return strings.Join(slices.Sorted(slices.Values(ids)), ",")
}

// checkOrder asserts the ArcOrder contract for one state: every arc once,
// sizes ascending, free arcs of a size before held ones, and the first free
// arc of each size is Preferred's answer.
func checkOrder(t *testing.T, l *Layout, held []string) {
	t.Helper()
	order := l.ArcOrder(held)
	all := l.Arcs()
	if len(order) != len(all) {
		t.Fatalf("ArcOrder has %d arcs, Arcs %d", len(order), len(all))
	}
	seen := map[Arc]bool{}
	for _, a := range order {
		seen[a] = true
	}
	for _, a := range all {
		if !seen[a] {
			t.Fatalf("ArcOrder misses %+v", a)
		}
	}
	isHeld := map[string]bool{}
	for _, id := range held {
		isHeld[id] = true
	}
	var available []string
	for _, ring := range l.Rings() {
		for _, id := range ring {
			if !isHeld[id] {
				available = append(available, id)
			}
		}
	}
	prevSize, sawHeld := 0, false
	firstFree := map[int][]string{}
	for i, a := range order {
		if a.Size < prevSize {
			t.Fatalf("order[%d] = %+v: size goes down from %d", i, a, prevSize)
		}
		if a.Size != prevSize {
			prevSize, sawHeld = a.Size, false
		}
		free := true
		for _, id := range l.ArcIDs(a) {
			if isHeld[id] {
				free = false
			}
		}
		if !free {
			sawHeld = true
			continue
		}
		if sawHeld {
			t.Fatalf("order[%d] = %+v is free but follows a held arc of its size", i, a)
		}
		if _, ok := firstFree[a.Size]; !ok {
			firstFree[a.Size] = l.ArcIDs(a)
		}
	}
	for size := 1; size <= prevSize; size++ {
		want, contiguous := l.PreferredArc(available, nil, size)
		if !contiguous {
			want = nil
		}
		if got := firstFree[size]; !reflect.DeepEqual(got, want) {
			t.Fatalf("held %v: first free arc of size %d = %v, Preferred = %v", held, size, got, want)
		}
	}
}

func TestArcOrder(t *testing.T) {
	tests := map[string]struct {
		rings [][]string
		held  []string
	}{
		"empty ring of 8":          {rings: oneRing8},
		"ring of 8 with holes":     {rings: oneRing8, held: ids(2, 5)},
		"ring of 8 all held":       {rings: oneRing8, held: span(0, 8)},
		"two rings, one busy":      {rings: twoRings8, held: ids(0, 1, 9)},
		"ring of 16 fragmented":    {rings: [][]string{span(0, 16)}, held: ids(0, 6, 9, 10)},
		"unequal rings":            {rings: [][]string{span(0, 4), span(4, 12)}, held: ids(5)},
		"unknown held IDs ignored": {rings: oneRing8, held: []string{"gpu0", "lpu3"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			checkOrder(t, mustLayout(t, tc.rings), tc.held)
		})
	}
}

func TestArcOrderEmptyRingStatic(t *testing.T) {
	l := mustLayout(t, oneRing8)
	order := l.ArcOrder(nil)
	// On an empty ring size 4 starts at 0, then the other aligned start.
	var fours []int
	for _, a := range order {
		if a.Size == 4 {
			fours = append(fours, a.Start)
		}
	}
	if fours[0] != 0 || fours[1] != 4 {
		t.Fatalf("size-4 starts on an empty ring = %v, want 0 then 4 first", fours)
	}
	if !reflect.DeepEqual(order, l.ArcOrder([]string{})) {
		t.Fatal("ArcOrder(nil) and ArcOrder([]) differ")
	}
}

func TestArcOrderRandomStates(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 9))
	layouts := [][][]string{oneRing8, twoRings8, {span(0, 16)}, {span(0, 3), span(3, 8)}}
	for i := 0; i < 300; i++ {
		rings := layouts[i%len(layouts)]
		l := mustLayout(t, rings)
		var held []string
		for _, ring := range rings {
			for _, id := range ring {
				if rng.IntN(3) == 0 {
					held = append(held, id)
				}
			}
		}
		checkOrder(t, l, held)
	}
}

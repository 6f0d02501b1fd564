package main

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/hyperaccel/lpu-node/lab/churn"
	"github.com/hyperaccel/lpu-node/pkg/alloc"
)

// TestFreeRuns: maximal free runs per ring, a wrap-around run kept whole,
// longest first, then by ring and start.
func TestFreeRuns(t *testing.T) {
	rings := [][]string{{"a0", "a1", "a2", "a3", "a4", "a5"}, {"b0", "b1", "b2", "b3"}}
	got := freeRuns(rings, []string{"a0", "a1", "a3", "a5", "b0", "b1", "b2", "b3"})
	want := [][]string{{"b0", "b1", "b2", "b3"}, {"a5", "a0", "a1"}, {"a3"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("freeRuns = %v, want %v", got, want)
	}
	if got := freeRuns(rings, nil); len(got) != 0 {
		t.Fatalf("no LPU free: %v", got)
	}
}

// TestCountDynamicFindsEveryArc: on random states of two rings of 8, the
// first k free singles in count-dynamic's order are ring neighbours
// whenever k free neighbours exist; in ring order (count-static) they are
// not always.
func TestCountDynamicFindsEveryArc(t *testing.T) {
	rings := [][]string{{"lpu0", "lpu1", "lpu2", "lpu3", "lpu4", "lpu5", "lpu6", "lpu7"},
		{"lpu8", "lpu9", "lpu10", "lpu11", "lpu12", "lpu13", "lpu14", "lpu15"}}
	l, err := alloc.NewLayout(rings)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	staticMissed := 0
	for range 2000 {
		var available []string
		for _, ring := range rings {
			for _, id := range ring {
				if rng.IntN(2) == 0 {
					available = append(available, id)
				}
			}
		}
		largest := slices.Max(append(l.LargestFreeArc(available), 0))
		for k := 1; k <= largest; k++ {
			pick := countPath{l: l, dynamic: true}.Pick(available, k)
			if p, err := l.Check(pick); err != nil || !p.Contiguous {
				t.Fatalf("free %v, k=%d: count-dynamic picked %v (%v), not an arc", available, k, pick, err)
			}
			if p, err := l.Check(countPath{l: l}.Pick(available, k)); err != nil || !p.Contiguous {
				staticMissed++
			}
		}
	}
	if staticMissed == 0 {
		t.Fatal("count-static found every arc too: the test's states cannot tell the orders apart")
	}
}

// TestCountPathRun: in a churn run, count-dynamic places every arrival
// that found a free arc of its size on one; count-static misses some.
func TestCountPathRun(t *testing.T) {
	cases, err := Run(Config{Arrivals: 20_000, Seed: 1, Load: 0.9, Count: true,
		Nodes: []Node{{Name: "2x8", Rings: [][]string{{"lpu0", "lpu1", "lpu2", "lpu3", "lpu4", "lpu5", "lpu6", "lpu7"},
			{"lpu8", "lpu9", "lpu10", "lpu11", "lpu12", "lpu13", "lpu14", "lpu15"}}}},
		Mixes: []churn.Mix{churn.MixDefault}})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Result{}
	for _, r := range cases[0].Results {
		got[r.Policy] = r
	}
	d, s := got["count-dynamic"], got["count-static"]
	if d.ArcFree == 0 || d.ContiguousWhenArcFree != d.ArcFree {
		t.Fatalf("count-dynamic: contiguous on %d of %d arrivals that found an arc", d.ContiguousWhenArcFree, d.ArcFree)
	}
	if s.ContiguousWhenArcFree >= s.ArcFree {
		t.Fatalf("count-static: contiguous on %d of %d arrivals that found an arc; want fewer", s.ContiguousWhenArcFree, s.ArcFree)
	}
}

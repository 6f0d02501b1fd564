package alloc

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// benchLayout builds rings×per devices, numbered over all rings.
func benchLayout(b *testing.B, rings, per int) *Layout {
	b.Helper()
	var rs [][]string
	for r := 0; r < rings; r++ {
		rs = append(rs, span(r*per, (r+1)*per))
	}
	return mustLayout(b, rs)
}

// halfBusy returns a fixed pseudo-random ~60% of the layout's devices, a
// fragmented node in the middle of its day.
func halfBusy(total int) []string {
	rng := rand.New(rand.NewPCG(1, 2))
	var out []string
	for i := 0; i < total; i++ {
		if rng.IntN(10) < 6 {
			out = append(out, fmt.Sprintf("lpu%d", i))
		}
	}
	return out
}

func BenchmarkPreferred(b *testing.B) {
	cases := []struct {
		name        string
		rings, per  int
		available   []string // nil: every device
		mustInclude []string
		size        int
	}{
		{name: "8 in 1 ring/free/size 2", rings: 1, per: 8, size: 2},
		{name: "8 in 1 ring/holes/size 2", rings: 1, per: 8, available: holes8Avail, size: 2},
		{name: "8 in 1 ring/holes/size 4 must", rings: 1, per: 8, available: holes8Avail, mustInclude: ids(0), size: 4},
		{name: "8 in 1 ring/holes/size 5 fallback", rings: 1, per: 8, available: holes8Avail, size: 5},
		{name: "256 in 32 rings of 8/free/size 4", rings: 32, per: 8, size: 4},
		{name: "256 in 32 rings of 8/60% free/size 4", rings: 32, per: 8, available: halfBusy(256), size: 4},
		{name: "256 in 32 rings of 8/60% free/size 16 fallback", rings: 32, per: 8, available: halfBusy(256), size: 16},
		{name: "256 in 1 ring/free/size 1", rings: 1, per: 256, size: 1},
		{name: "256 in 1 ring/60% free/size 4", rings: 1, per: 256, available: halfBusy(256), size: 4},
		{name: "256 in 1 ring/60% free/size 64 fallback", rings: 1, per: 256, available: halfBusy(256), size: 64},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			l := benchLayout(b, c.rings, c.per)
			avail := c.available
			if avail == nil {
				avail = span(0, c.rings*c.per)
			}
			if got := l.Preferred(avail, c.mustInclude, c.size); len(got) != c.size {
				b.Fatalf("Preferred returned %v, want %d devices", got, c.size)
			}
			b.ReportAllocs()
			for b.Loop() {
				l.Preferred(avail, c.mustInclude, c.size)
			}
		})
	}
}

func BenchmarkCheck(b *testing.B) {
	l := benchLayout(b, 1, 8)
	set := ids(7, 0, 1)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := l.Check(set); err != nil {
			b.Fatal(err)
		}
	}
}

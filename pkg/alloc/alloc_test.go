package alloc

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// ids returns "lpuN" for each index.
func ids(idx ...int) []string {
	out := make([]string, len(idx))
	for i, x := range idx {
		out[i] = fmt.Sprintf("lpu%d", x)
	}
	return out
}

// span returns the IDs lpu<from> … lpu<to-1>.
func span(from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("lpu%d", i))
	}
	return out
}

func without(all []string, drop ...string) []string {
	var out []string
	for _, id := range all {
		keep := true
		for _, d := range drop {
			if id == d {
				keep = false
			}
		}
		if keep {
			out = append(out, id)
		}
	}
	return out
}

// Named ring fixtures.
var (
	oneRing8  = [][]string{span(0, 8)}
	twoRings8 = [][]string{span(0, 8), span(8, 16)}
	// holes8 is one ring of 8 whose lpu2 and lpu5 are unhealthy (or taken):
	// they are never offered as available.
	holes8      = [][]string{span(0, 8)}
	holes8Avail = without(span(0, 8), "lpu2", "lpu5")
)

func mustLayout(t testing.TB, rings [][]string) *Layout {
	t.Helper()
	l, err := NewLayout(rings)
	if err != nil {
		t.Fatalf("NewLayout(%v): %v", rings, err)
	}
	return l
}

func TestNewLayout(t *testing.T) {
	tests := map[string]struct {
		rings   [][]string
		wantErr string // substring; "" means success
	}{
		"one ring of 8":  {rings: oneRing8},
		"two rings of 8": {rings: twoRings8},
		"no rings":       {rings: nil},
		"empty ring":     {rings: [][]string{span(0, 4), {}}, wantErr: "ring 1: empty ring"},
		"empty ID":       {rings: [][]string{{"lpu0", "", "lpu2"}}, wantErr: "ring 0 position 1: empty device ID"},
		"duplicate in ring": {
			rings:   [][]string{{"lpu0", "lpu1", "lpu0"}},
			wantErr: `device "lpu0" listed twice: ring 0 position 0 and ring 0 position 2`,
		},
		"duplicate across rings": {
			rings:   [][]string{span(0, 4), {"lpu4", "lpu3"}},
			wantErr: `device "lpu3" listed twice: ring 0 position 3 and ring 1 position 1`,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			l, err := NewLayout(tc.rings)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if got := l.Rings(); len(got) != len(tc.rings) || (len(got) > 0 && !reflect.DeepEqual(got, tc.rings)) {
				t.Fatalf("Rings() = %v, want %v", got, tc.rings)
			}
		})
	}
}

func TestRingsIsACopy(t *testing.T) {
	l := mustLayout(t, oneRing8)
	l.Rings()[0][0] = "mutated"
	if got := l.Rings()[0][0]; got != "lpu0" {
		t.Fatalf("Rings() shares memory with the layout: got %q", got)
	}
}

func TestPreferred(t *testing.T) {
	tests := map[string]struct {
		rings       [][]string
		available   []string
		mustInclude []string
		size        int
		want        []string
	}{
		// One ring of 8, everything free: buddy-like packing from position 0.
		"ring8 empty size 1":    {rings: oneRing8, available: span(0, 8), size: 1, want: ids(0)},
		"ring8 empty size 2":    {rings: oneRing8, available: span(0, 8), size: 2, want: ids(0, 1)},
		"ring8 empty size 3":    {rings: oneRing8, available: span(0, 8), size: 3, want: ids(0, 1, 2)},
		"ring8 empty size 4":    {rings: oneRing8, available: span(0, 8), size: 4, want: ids(0, 1, 2, 3)},
		"ring8 whole ring":      {rings: oneRing8, available: span(0, 8), size: 8, want: span(0, 8)},
		"ring8 size 1 next":     {rings: oneRing8, available: span(1, 8), size: 1, want: ids(1)},
		"ring8 size 2 after 1":  {rings: oneRing8, available: span(1, 8), size: 2, want: ids(6, 7)}, // 1-2 and 6-7 both leave 5; 6 is 2-aligned
		"ring8 size 2 after 2":  {rings: oneRing8, available: span(2, 8), size: 2, want: ids(2, 3)},
		"ring8 size 4 after 2":  {rings: oneRing8, available: span(2, 8), size: 4, want: ids(4, 5, 6, 7)},
		"ring8 whole ring busy": {rings: oneRing8, available: span(0, 7), size: 8, want: nil},
		// Best fit: the exact-size hole is used, the long arc kept.
		"ring8 fills the snug hole": {
			rings: oneRing8, available: ids(1, 2, 4, 5, 6, 7), size: 2, want: ids(1, 2),
		},
		"ring8 wrap arc": {
			rings: oneRing8, available: ids(7, 0, 1, 4), size: 3, want: ids(7, 0, 1),
		},
		"ring8 wrap arc with must": {
			rings: oneRing8, available: ids(6, 7, 0, 1, 2), mustInclude: ids(0), size: 2, want: ids(0, 1),
		},
		"ring8 must forces the middle": {
			rings: oneRing8, available: span(0, 8), mustInclude: ids(4), size: 1, want: ids(4),
		},
		"ring8 must at both ends of the arc": {
			rings: oneRing8, available: span(0, 8), mustInclude: ids(6, 1), size: 4, want: ids(6, 7, 0, 1),
		},
		"ring8 must not available": {
			rings: oneRing8, available: span(0, 4), mustInclude: ids(5), size: 1, want: nil,
		},
		"ring8 must larger than size": {
			rings: oneRing8, available: span(0, 8), mustInclude: ids(0, 1, 2), size: 2, want: nil,
		},
		"ring8 unknown IDs ignored": {
			rings: oneRing8, available: append(ids(3, 4), "gpu0", "lpu99"), mustInclude: []string{"lpu42"}, size: 2, want: ids(3, 4),
		},
		"ring8 duplicates in available count once": {
			rings: oneRing8, available: ids(3, 3, 3), size: 2, want: nil,
		},
		"ring8 size zero":              {rings: oneRing8, available: span(0, 8), size: 0, want: nil},
		"ring8 size exceeds available": {rings: oneRing8, available: ids(0, 1), size: 3, want: nil},

		// Holes: lpu2 and lpu5 are gone, free arcs are 6-7-0-1 and 3-4.
		"holes size 2 takes the snug arc": {rings: holes8, available: holes8Avail, size: 2, want: ids(3, 4)},
		"holes size 4 wraps":              {rings: holes8, available: holes8Avail, size: 4, want: ids(6, 7, 0, 1)},
		"holes size 3 keeps 3-4": {
			// 6-7-0 leaves {1} and {3,4}; 7-0-1 leaves {6} and {3,4}: equal
			// longest arc and segments, neither start is 4-aligned, the
			// lower start wins.
			rings: holes8, available: holes8Avail, size: 3, want: ids(6, 7, 0),
		},
		"holes size 5 fallback": {
			// No arc of 5: 6-7-0-1 whole plus one of 3-4, in ring order
			// after the widest gap.
			rings: holes8, available: holes8Avail, size: 5, want: ids(6, 7, 0, 1, 3),
		},
		"holes size 6 takes all":     {rings: holes8, available: holes8Avail, size: 6, want: ids(3, 4, 6, 7, 0, 1)},
		"holes must on the far side": {rings: holes8, available: holes8Avail, mustInclude: ids(3), size: 2, want: ids(3, 4)},
		"holes must forces fallback": {
			// 3 must come with 2 more: 3-4 is only 2 long, so 2 pieces.
			rings: holes8, available: holes8Avail, mustInclude: ids(3), size: 3, want: ids(3, 4, 6),
		},

		// Power-of-two shapes first: 4+2 left beats 5+1 left, though 5 is
		// the longer arc (the simulator measured this order).
		"ring16 keeps power-of-two shapes": {
			rings: [][]string{span(0, 16)}, available: ids(1, 2, 3, 4, 5, 7, 8), size: 1, want: ids(1),
		},
		"ring16 size 2 keeps the 4": {
			rings: [][]string{span(0, 16)}, available: ids(1, 2, 3, 4, 5, 7, 8), size: 2, want: ids(7, 8),
		},

		// Two rings of 8.
		"two rings prefer the busier ring": {
			rings: twoRings8, available: append(span(2, 8), span(8, 16)...), size: 2, want: ids(2, 3),
		},
		"two rings whole second ring": {
			rings: twoRings8, available: append(span(2, 8), span(8, 16)...), size: 8, want: span(8, 16),
		},
		"two rings must on second ring": {
			rings: twoRings8, available: append(span(0, 8), span(8, 16)...), mustInclude: ids(12), size: 2, want: ids(12, 13),
		},
		"two rings stays on one ring without an arc": {
			// Ring 0 has 4 free in two pieces, ring 1 has 3 free: the set
			// stays on ring 0 even though no arc of 4 exists.
			rings: twoRings8, available: ids(0, 1, 4, 5, 8, 9, 10), size: 4, want: ids(0, 1, 4, 5),
		},
		"two rings spans only when it must": {
			rings: twoRings8, available: ids(0, 1, 2, 8, 9), size: 5, want: ids(0, 1, 2, 8, 9),
		},
		"two rings musts on both rings": {
			rings: twoRings8, available: append(span(0, 8), span(8, 16)...), mustInclude: ids(1, 9), size: 3, want: ids(1, 2, 9),
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			l := mustLayout(t, tc.rings)
			got := l.Preferred(tc.available, tc.mustInclude, tc.size)
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Preferred(%v, %v, %d) = %v, want %v", tc.available, tc.mustInclude, tc.size, got, tc.want)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	tests := map[string]struct {
		rings   [][]string
		ids     []string
		want    Placement
		wantErr string
	}{
		"arc in order": {
			rings: oneRing8, ids: ids(2, 3, 4),
			want: Placement{IDs: ids(2, 3, 4), Ring: 0, Contiguous: true},
		},
		"arc shuffled": {
			rings: oneRing8, ids: ids(4, 2, 3),
			want: Placement{IDs: ids(2, 3, 4), Ring: 0, Contiguous: true},
		},
		"wrap-around arc starts at 7": {
			rings: oneRing8, ids: ids(1, 7, 0),
			want: Placement{IDs: ids(7, 0, 1), Ring: 0, Contiguous: true},
		},
		"single device": {
			rings: oneRing8, ids: ids(5),
			want: Placement{IDs: ids(5), Ring: 0, Contiguous: true},
		},
		"whole ring": {
			rings: oneRing8, ids: ids(3, 4, 5, 6, 7, 0, 1, 2),
			want: Placement{IDs: span(0, 8), Ring: 0, Contiguous: true},
		},
		"not neighbours": {
			rings: oneRing8, ids: ids(0, 2, 3),
			want: Placement{IDs: ids(0, 2, 3), Ring: 0, Reason: "not ring neighbours: lpu0,lpu2,lpu3"},
		},
		"not neighbours lowest start on equal gaps": {
			rings: oneRing8, ids: ids(0, 4),
			want: Placement{IDs: ids(0, 4), Ring: 0, Reason: "not ring neighbours: lpu0,lpu4"},
		},
		"spans two rings": {
			rings: twoRings8, ids: ids(9, 0, 8),
			want: Placement{IDs: ids(0, 8, 9), Ring: -1, Reason: "spans rings 0 and 1"},
		},
		"spans three rings": {
			rings: [][]string{span(0, 2), span(2, 4), span(4, 6)}, ids: ids(5, 0, 2),
			want: Placement{IDs: ids(0, 2, 5), Ring: -1, Reason: "spans rings 0, 1 and 2"},
		},
		"second ring arc": {
			rings: twoRings8, ids: ids(15, 8),
			want: Placement{IDs: ids(15, 8), Ring: 1, Contiguous: true},
		},
		"empty": {
			rings: oneRing8, ids: nil,
			want: Placement{Ring: -1, Reason: "no devices"},
		},
		"unknown":   {rings: oneRing8, ids: []string{"lpu1", "lpu9", "gpu0"}, wantErr: `unknown device IDs: "lpu9","gpu0"`},
		"duplicate": {rings: oneRing8, ids: ids(1, 2, 1), wantErr: "duplicate device IDs: lpu1"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			l := mustLayout(t, tc.rings)
			got, err := l.Check(tc.ids)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Check(%v) = %+v, want %+v", tc.ids, got, tc.want)
			}
		})
	}
}

func TestLargestFreeArc(t *testing.T) {
	tests := map[string]struct {
		rings     [][]string
		available []string
		want      []int
	}{
		"all free":         {rings: oneRing8, available: span(0, 8), want: []int{8}},
		"none free":        {rings: oneRing8, available: nil, want: []int{0}},
		"holes":            {rings: holes8, available: holes8Avail, want: []int{4}},
		"wrap run":         {rings: oneRing8, available: ids(6, 7, 0, 3), want: []int{3}},
		"two rings":        {rings: twoRings8, available: append(ids(1, 2), span(8, 16)...), want: []int{2, 8}},
		"unknown ignored":  {rings: oneRing8, available: []string{"lpu1", "x"}, want: []int{1}},
		"duplicates":       {rings: oneRing8, available: ids(1, 1, 2), want: []int{2}},
		"one device ring":  {rings: [][]string{{"lpu0"}}, available: ids(0), want: []int{1}},
		"two device ring":  {rings: [][]string{{"lpu0", "lpu1"}}, available: ids(1), want: []int{1}},
		"no rings at all":  {rings: nil, available: ids(1), want: []int{}},
		"ring with a hole": {rings: oneRing8, available: without(span(0, 8), "lpu0"), want: []int{7}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			l := mustLayout(t, tc.rings)
			if got := l.LargestFreeArc(tc.available); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("LargestFreeArc(%v) = %v, want %v", tc.available, got, tc.want)
			}
		})
	}
}

// A Layout is read-only after NewLayout: concurrent callers (kubelet's
// GetPreferredAllocation and Allocate run in parallel) must not race.
func TestConcurrentUse(t *testing.T) {
	l := mustLayout(t, twoRings8)
	done := make(chan struct{})
	for g := 0; g < 4; g++ {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := 0; i < 200; i++ {
				if got := l.Preferred(holes8Avail, nil, 2); !reflect.DeepEqual(got, ids(3, 4)) {
					t.Errorf("Preferred = %v", got)
					return
				}
				if _, err := l.Check(ids(1, 2)); err != nil {
					t.Error(err)
					return
				}
				l.LargestFreeArc(holes8Avail)
			}
		}()
	}
	for g := 0; g < 4; g++ {
		<-done
	}
}

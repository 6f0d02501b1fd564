package churn

import (
	"math"
	"testing"
)

func TestGenerate(t *testing.T) {
	jobs := Generate(1, MixDefault, 20000, 0.9, 800)
	again := Generate(1, MixDefault, 20000, 0.9, 800)
	counts := map[int]int{}
	life, prev := 0.0, 0.0
	for i, j := range jobs {
		if j != again[i] {
			t.Fatalf("job %d differs between two runs with one seed: %+v %+v", i, j, again[i])
		}
		if j.Arrive < prev || j.End <= j.Arrive {
			t.Fatalf("job %d: arrive %v after %v, end %v", i, j.Arrive, prev, j.End)
		}
		prev = j.Arrive
		counts[j.Size]++
		life += j.End - j.Arrive
	}
	for i, s := range MixDefault.Sizes {
		share := float64(counts[s]) / float64(len(jobs))
		if want := float64(MixDefault.Weights[i]) / 100; math.Abs(share-want) > 0.02 {
			t.Errorf("size %d: share %.3f, want %.2f", s, share, want)
		}
	}
	if mean := life / float64(len(jobs)); math.Abs(mean-1) > 0.05 {
		t.Errorf("mean lifetime %.3f, want 1", mean)
	}
	// Offered load: rate × mean size × mean lifetime = 0.9 × 800.
	rate := float64(len(jobs)) / jobs[len(jobs)-1].Arrive
	if load := rate * MixDefault.Mean() / 800; math.Abs(load-0.9) > 0.03 {
		t.Errorf("offered load %.3f, want 0.9", load)
	}
}

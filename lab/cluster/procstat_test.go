package main

import (
	"math"
	"testing"
)

func TestQuantile(t *testing.T) {
	// 100 samples: 50 ≤ 1 ms, 40 in (1, 2] ms, 10 in (2, 4] ms.
	a := schedMetrics{buckets: map[float64]float64{0.001: 10, 0.002: 10, 0.004: 10, math.Inf(1): 10}}
	b := schedMetrics{buckets: map[float64]float64{0.001: 60, 0.002: 100, 0.004: 110, math.Inf(1): 110}}
	tests := map[string]struct{ q, want float64 }{
		"p50": {0.5, 0.001},
		"p70": {0.7, 0.0015},
		"p99": {0.99, 0.0038},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := quantile(a, b, tc.q); math.Abs(got-tc.want) > 1e-9 {
				t.Fatalf("quantile %v = %v, want %v", tc.q, got, tc.want)
			}
		})
	}
	if got := quantile(a, a, 0.5); !math.IsNaN(got) {
		t.Fatalf("no samples: %v, want NaN", got)
	}
}

package backoff

import (
	"testing"
	"time"
)

func TestOrDefaultAndNext(t *testing.T) {
	tests := map[string]struct {
		in, want Steps
	}{
		"zero":        {Steps{}, Default},
		"min only":    {Steps{Min: time.Millisecond}, Steps{Min: time.Millisecond, Max: Default.Max}},
		"max only":    {Steps{Max: time.Second}, Steps{Min: Default.Min, Max: time.Second}},
		"max too low": {Steps{Min: time.Second, Max: time.Millisecond}, Steps{Min: time.Second, Max: time.Second}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := tc.in.OrDefault(); got != tc.want {
				t.Fatalf("OrDefault = %+v, want %+v", got, tc.want)
			}
		})
	}
	s := Steps{Min: 100 * time.Millisecond, Max: 300 * time.Millisecond}
	var got []time.Duration
	for d := s.Min; len(got) < 4; d = s.Next(d) {
		got = append(got, d)
	}
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 300 * time.Millisecond, 300 * time.Millisecond}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("waits %v, want %v", got, want)
		}
	}
}

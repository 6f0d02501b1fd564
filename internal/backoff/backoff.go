// Package backoff holds the one retry schedule of the daemons' reconnect
// loops (the kubelet registration and the NRI connection): a first wait
// of Min, doubling after each failure up to Max.
//
//	steps := backoff.Default
//	wait := steps.Min
//	for !try() {
//		sleep(wait)
//		wait = steps.Next(wait)
//	}
package backoff

import "time"

// Steps bound a retry loop's waits.
type Steps struct {
	Min, Max time.Duration
}

// Default is 100 ms doubling to 5 s: quick after a restart of the other
// side, and a few seconds apart while it stays away.
var Default = Steps{Min: 100 * time.Millisecond, Max: 5 * time.Second}

// OrDefault fills zero fields from Default and raises Max to at least Min.
func (s Steps) OrDefault() Steps {
	if s.Min <= 0 {
		s.Min = Default.Min
	}
	if s.Max <= 0 {
		s.Max = Default.Max
	}
	s.Max = max(s.Max, s.Min)
	return s
}

// Next returns the wait after one of d: doubled, at most Max.
func (s Steps) Next(d time.Duration) time.Duration { return min(2*d, s.Max) }

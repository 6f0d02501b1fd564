package faults

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/hyperaccel/lpu-node/internal/atomicfile"
	"github.com/hyperaccel/lpu-node/internal/statedir"
)

// Window is how far back a fault counts.
const Window = 24 * time.Hour

// FileName is the history's file in the state dir.
const FileName = "lpu-dra-faults.json"

// maxPerLPU bounds the faults kept per LPU: an LPU flapping all day must
// not grow the file without end, and a count this high already says all a
// selector needs.
const maxPerLPU = 100

// maxFileSize bounds what Open reads.
const maxFileSize = 4 << 20

// record is the file's content.
type record struct {
	Version int                    `json:"version"`
	Sick    []string               `json:"sick,omitempty"`
	Faults  map[string][]time.Time `json:"faults,omitempty"`
}

// Log is the fault history of one node's LPUs. It is safe for concurrent
// use.
type Log struct {
	path string
	now  func() time.Time

	mu     sync.Mutex
	sick   map[string]bool        // unhealthy at the last Observe
	faults map[string][]time.Time // per LPU, oldest first, within Window
}

// Open loads the history from path; a missing file is an empty history.
// A file that cannot be read or parsed is an error naming it, and the Log
// returned with it is empty, so the caller may go on without history.
// now is the clock (time.Now in production).
func Open(path string, now func() time.Time) (*Log, error) {
	l := &Log{path: path, now: now, sick: map[string]bool{}, faults: map[string][]time.Time{}}
	data, err := statedir.ReadFile(path, maxFileSize)
	if errors.Is(err, fs.ErrNotExist) {
		return l, nil
	}
	if err != nil {
		return l, fmt.Errorf("fault history %s: %w", path, err)
	}
	var r record
	if err := json.Unmarshal(data, &r); err != nil {
		return l, fmt.Errorf("parse fault history %s: %w", path, err)
	}
	if r.Version != 1 {
		return l, fmt.Errorf("fault history %s: version %d, want 1", path, r.Version)
	}
	for _, id := range r.Sick {
		l.sick[id] = true
	}
	at := now()
	for id, ts := range r.Faults {
		if len(ts) == 0 {
			continue
		}
		ts = slices.Clone(ts)
		for i := range ts {
			// A fault from the future (the clock was set back) counts
			// from now, or it would outlive its window.
			if ts[i].After(at) {
				ts[i] = at
			}
		}
		slices.SortFunc(ts, time.Time.Compare)
		if len(ts) > maxPerLPU {
			ts = ts[len(ts)-maxPerLPU:]
		}
		l.faults[id] = ts
	}
	l.expire()
	return l, nil
}

// Observe records a fault for every LPU of sick that was not unhealthy at
// the previous Observe, and saves the history when it changed. It reports
// whether the counts changed. A failed save is returned; the history in
// memory is kept either way.
func (l *Log) Observe(sick map[string]bool) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	changed := l.expire()
	for id := range sick {
		if l.sick[id] {
			continue
		}
		ts := append(l.faults[id], now)
		if len(ts) > maxPerLPU {
			ts = ts[len(ts)-maxPerLPU:]
		}
		l.faults[id] = ts
		changed = true
	}
	sickChanged := !maps.Equal(l.sick, sick)
	if sickChanged {
		l.sick = maps.Clone(sick)
		if l.sick == nil {
			l.sick = map[string]bool{}
		}
	}
	if !changed && !sickChanged {
		return false, nil
	}
	return changed, l.save()
}

// Counts returns the faults of each LPU within the last Window; LPUs
// without any are left out.
func (l *Log) Counts() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.expire()
	out := make(map[string]int, len(l.faults))
	for id, ts := range l.faults {
		out[id] = len(ts)
	}
	return out
}

// NextExpiry returns how long until the oldest fault leaves the window,
// by the Log's clock, and false when there is none.
func (l *Log) NextExpiry() (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var next time.Time
	for _, ts := range l.faults {
		if at := ts[0].Add(Window); next.IsZero() || at.Before(next) {
			next = at
		}
	}
	if next.IsZero() {
		return 0, false
	}
	return max(next.Sub(l.now()), 0), true
}

// expire drops the faults older than Window and reports whether any went.
func (l *Log) expire() bool {
	cut := l.now().Add(-Window)
	dropped := false
	for id, ts := range l.faults {
		i := 0
		for i < len(ts) && !ts[i].After(cut) {
			i++
		}
		if i == 0 {
			continue
		}
		dropped = true
		if i == len(ts) {
			delete(l.faults, id)
		} else {
			l.faults[id] = ts[i:]
		}
	}
	return dropped
}

// save writes the history atomically, readable by the daemon's uid only.
func (l *Log) save() error {
	r := record{Version: 1, Faults: l.faults}
	for id := range l.sick {
		r.Sick = append(r.Sick, id)
	}
	slices.Sort(r.Sick)
	data, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode fault history: %w", err)
	}
	if err := atomicfile.Write(l.path, data, atomicfile.WithMode(0o600)); err != nil {
		return fmt.Errorf("write fault history %s: %w", l.path, err)
	}
	return nil
}

package plugin

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"sync"

	"github.com/hyperaccel/lpu-node/internal/health"
	"github.com/hyperaccel/lpu-node/pkg/device"
)

// Health reasons of an LPU the operator took out of service (pkg/cordon):
// it is reported Unhealthy to the kubelet, which stops offering it, and
// Allocate refuses it naming the reason.
const (
	ReasonCordoned = "cordoned"
	// ReasonCordonUnknown: the Node's cordoned LPUs were not read yet, so
	// every LPU is held back (fail closed) rather than offer a cordoned one.
	ReasonCordonUnknown = "cordoned LPUs of the node not read yet"
)

// Cordon is the node's cordoned LPUs (cordon.Watcher).
type Cordon interface {
	// Snapshot returns the cordoned LPU IDs (read-only) and a channel
	// closed when they or Known change.
	Snapshot() (map[string]bool, <-chan struct{})
	// Known says whether the IDs are the Node's (read once).
	Known() bool
}

// CordonSource is a Source: the devices of another Source with the
// cordoned LPUs Unhealthy (reason ReasonCordoned), and every LPU
// Unhealthy (ReasonCordonUnknown) until the Node was read. Run passes the
// changes of either on.
type CordonSource struct {
	src    Source
	cordon Cordon
	log    *slog.Logger

	mu      sync.Mutex
	changed chan struct{}
}

var _ Source = (*CordonSource)(nil)

// NewCordonSource returns src's devices as cordon says; nil log discards.
func NewCordonSource(src Source, cordon Cordon, log *slog.Logger) *CordonSource {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &CordonSource{src: src, cordon: cordon, log: log, changed: make(chan struct{})}
}

// Snapshot returns the devices with the cordoned ones Unhealthy, and a
// channel closed at the next change of the devices or of the cordoned
// LPUs (while Run runs).
func (s *CordonSource) Snapshot() (health.Snapshot, <-chan struct{}) {
	s.mu.Lock()
	ch := s.changed
	s.mu.Unlock()
	snap, _ := s.src.Snapshot()
	set, _ := s.cordon.Snapshot()
	return withCordoned(snap, set, s.cordon.Known()), ch
}

// Run passes each change of the devices or the cordoned LPUs on to
// Snapshot's callers, logging what it reports cordoned, until ctx ends.
func (s *CordonSource) Run(ctx context.Context) error {
	_, devs := s.src.Snapshot()
	set, cordons := s.cordon.Snapshot()
	known := s.cordon.Known()
	s.logCordoned(nil, false, set, known)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-devs:
		case <-cordons:
		}
		// Take the next channels before telling: a change from here on
		// closes them, so none falls between two waits.
		_, devs = s.src.Snapshot()
		var next map[string]bool
		next, cordons = s.cordon.Snapshot()
		nextKnown := s.cordon.Known()
		s.logCordoned(set, known, next, nextKnown)
		set, known = next, nextKnown
		s.mu.Lock()
		close(s.changed)
		s.changed = make(chan struct{})
		s.mu.Unlock()
	}
}

// logCordoned logs a change of what is held back from the kubelet.
func (s *CordonSource) logCordoned(was map[string]bool, wasKnown bool, now map[string]bool, known bool) {
	switch {
	case !known && was == nil && !wasKnown:
		s.log.Info("cordoned LPUs of the node not read yet: reporting every LPU Unhealthy to the kubelet until they are")
	case known && (!wasKnown || !maps.Equal(was, now)):
		s.log.Info("cordoned LPUs reported Unhealthy to the kubelet", "lpus", slices.Sorted(maps.Keys(now)), "reason", ReasonCordoned)
	}
}

// withCordoned returns snap with the LPUs of set (every LPU unless known)
// Unhealthy; an LPU already unhealthy keeps its own reason. snap itself is
// not changed: the monitor shares it.
func withCordoned(snap health.Snapshot, set map[string]bool, known bool) health.Snapshot {
	if snap.Inventory == nil || (known && len(set) == 0) {
		return snap
	}
	inv := *snap.Inventory
	inv.Devices = slices.Clone(inv.Devices)
	for i, d := range inv.Devices {
		switch {
		case !d.Health.Healthy:
		case !known:
			inv.Devices[i].Health = device.Health{Reason: ReasonCordonUnknown}
		case set[d.ID]:
			inv.Devices[i].Health = device.Health{Reason: ReasonCordoned}
		}
	}
	snap.Inventory = &inv
	return snap
}

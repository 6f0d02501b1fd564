package publish

import (
	"context"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/hyperaccel/lpu-node/cmd/lpu-dra/internal/faults"
	"github.com/hyperaccel/lpu-node/internal/health/healthtest"
	"github.com/hyperaccel/lpu-node/pkg/arcslice"
	"github.com/hyperaccel/lpu-node/pkg/device"
)

// recentFaults maps each published device to its recentFaults attribute;
// a device without one fails t.
func recentFaults(t *testing.T, e *env) map[string]int64 {
	t.Helper()
	res, err := e.p.Resources()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, s := range res.Pools[node].Slices {
		for _, d := range s.Devices {
			a, ok := d.Attributes[arcslice.RecentFaultsAttribute]
			if !ok || a.IntValue == nil {
				t.Fatalf("device %s has no int %s", d.Name, arcslice.RecentFaultsAttribute)
			}
			out[d.Name] = *a.IntValue
		}
	}
	return out
}

// An LPU that turned unhealthy is counted on every arc holding it, after
// it recovered too, and not after the window.
func TestRecentFaultsFollowTheHistory(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	log, err := faults.Open(filepath.Join(t.TempDir(), faults.FileName), func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	sick := healthtest.Ring(8)
	sick.Devices[2].Health = device.Health{Reason: "status ECC_ERROR"}
	healthy := newEnvWith(t, healthtest.Ring(8), log)
	ill := newEnvWith(t, sick, log)

	for name, n := range recentFaults(t, healthy) {
		if n != 0 {
			t.Fatalf("before any fault %s has recentFaults %d", name, n)
		}
	}
	recentFaults(t, ill) // lpu2 turns unhealthy: one fault
	got := recentFaults(t, healthy)
	holding := 0
	for name, n := range got {
		a, err := arcslice.ParseDeviceName(name)
		if err != nil {
			t.Fatal(err)
		}
		want := int64(0)
		if (2-a.Start+8)%8 < a.Size { // the arc covers ring position 2
			want = 1
			holding++
		}
		if n != want {
			t.Errorf("recovered: %s has recentFaults %d, want %d", name, n, want)
		}
	}
	if holding == 0 {
		t.Fatal("no published arc holds lpu2")
	}
	now = now.Add(faults.Window + time.Second)
	for name, n := range recentFaults(t, healthy) {
		if n != 0 {
			t.Fatalf("after the window %s has recentFaults %d", name, n)
		}
	}
}

// newEnvWith is newEnv on a fixed inventory with a fault history.
func newEnvWith(t *testing.T, inv *device.Inventory, log *faults.Log) *env {
	e := &env{t: t, stateDir: t.TempDir(), cdiDir: filepath.Join(t.TempDir(), "cdi"), devices: healthtest.New(t, inv), faults: log}
	e.restart()
	return e
}

// lastSink keeps the last publication.
type lastSink struct {
	mu   sync.Mutex
	last resourceslice.DriverResources
	n    int
}

func (s *lastSink) PublishResources(_ context.Context, r resourceslice.DriverResources) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last, s.n = r, s.n+1
	return nil
}

// faultsOf returns the largest recentFaults of the last publication and
// how many publications there were.
func (s *lastSink) faultsOf() (int64, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var most int64
	for _, sl := range s.last.Pools[node].Slices {
		for _, d := range sl.Devices {
			if a := d.Attributes[arcslice.RecentFaultsAttribute]; a.IntValue != nil && *a.IntValue > most {
				most = *a.IntValue
			}
		}
	}
	return most, s.n
}

// Run republishes when a fault leaves the window, with nothing else
// changing: the attribute must not wait for the next health flip.
func TestRunRepublishesWhenAFaultAges(t *testing.T) {
	var offset atomic.Int64 // added to the real clock
	clock := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	log, err := faults.Open(filepath.Join(t.TempDir(), faults.FileName), clock)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := log.Observe(map[string]bool{"lpu5": true}); err != nil {
		t.Fatal(err)
	}
	if _, err := log.Observe(nil); err != nil {
		t.Fatal(err)
	}
	offset.Store(int64(faults.Window - 300*time.Millisecond)) // it ages out in 0.3 s
	e := newEnvWith(t, healthtest.Ring(8), log)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rec := &lastSink{}
	done := make(chan error, 1)
	go func() { done <- e.p.Run(ctx, rec) }()
	deadline := time.Now().Add(30 * time.Second)
	sawFault := false
	for time.Now().Before(deadline) {
		most, n := rec.faultsOf()
		if n > 0 && most == 1 {
			sawFault = true
		}
		if sawFault && most == 0 && n >= 2 {
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	most, n := rec.faultsOf()
	t.Fatalf("after 30 s: %d publications, saw the fault %v, largest recentFaults now %d; want a republication with 0", n, sawFault, most)
}

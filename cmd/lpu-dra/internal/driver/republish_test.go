package driver

import (
	"context"
	"sync"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/hyperaccel/lpu-node/internal/daemontest"
	"github.com/hyperaccel/lpu-node/internal/health"
	"github.com/hyperaccel/lpu-node/internal/health/healthtest"
	"github.com/hyperaccel/lpu-node/pkg/arcslice"
	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/device/devicetest"
)

// recorder is a publish.Sink that keeps what it was given.
type recorder struct {
	mu   sync.Mutex
	last resourceslice.DriverResources
	n    int
	ch   chan struct{}
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

func newRecorder() *recorder { return &recorder{ch: make(chan struct{}, 100)} }

func (r *recorder) PublishResources(_ context.Context, res resourceslice.DriverResources) error {
	r.mu.Lock()
	r.last, r.n = res, r.n+1
	r.mu.Unlock()
	r.ch <- struct{}{}
	return nil
}

// first returns the first device of the given size in the last
// publication, and the taints by device name.
func (r *recorder) first(size int) (string, map[string][]resourceapi.DeviceTaint) {
	r.mu.Lock()
	defer r.mu.Unlock()
	taints := map[string][]resourceapi.DeviceTaint{}
	first := ""
	for _, s := range r.last.Pools[node].Slices {
		for _, d := range s.Devices {
			if len(d.Taints) > 0 {
				taints[d.Name] = d.Taints
			}
			if a, _ := arcslice.ParseDeviceName(d.Name); a.Size == size && first == "" {
				first = d.Name
			}
		}
	}
	return first, taints
}

func (r *recorder) wait(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.After(time.Second)
	for !cond() {
		select {
		case <-r.ch:
		case <-deadline:
			t.Fatal("condition not met within 1 s")
		}
	}
}

func TestRepublishFollowsPrepared(t *testing.T) {
	e := newEnv(t, healthtest.New(t, healthtest.Ring(8)))
	rec := newRecorder()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = e.d.RunPublisher(ctx, rec) }()
	defer func() { cancel(); <-done }()
	rec.wait(t, func() bool { f, _ := rec.first(4); return f == "ring0-start0-size4" })
	e.prepare(claim("u1", arc(0, 4)))
	rec.wait(t, func() bool { f, _ := rec.first(4); return f == "ring0-start4-size4" })
	if err := e.unprepare("u1"); err != nil {
		t.Fatal(err)
	}
	rec.wait(t, func() bool { f, _ := rec.first(4); return f == "ring0-start0-size4" })
	// The publisher counts a publication after the recorder has seen it.
	daemontest.Eventually(t, 5*time.Second, "3 republishes counted", func() bool {
		return counter(t, e.metrics, MetricRepublishes, "") >= 3
	})
}

// The real health monitor over a fake sysfs tree: an LPU failing taints
// its arcs within 1 s, recovery lifts the taints, and WatchHealthStatus
// reports the arcs.
func TestHealthTaintsArcs(t *testing.T) {
	var rows []devicetest.Row
	for i := 0; i < 8; i++ {
		rows = append(rows, devicetest.Row{Index: i})
	}
	root := devicetest.NewTree(t, rows...)
	mon := health.New(device.NewSysfs(root), health.Options{PollInterval: 50 * time.Millisecond, ProbeInterval: 20 * time.Millisecond,
		ResyncInterval: time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = mon.Run(ctx) }()
	defer func() { cancel(); wg.Wait() }()
	<-mon.Ready()
	e := newEnv(t, mon)
	rec := newRecorder()
	wg.Add(1)
	go func() { defer wg.Done(); _ = e.d.RunPublisher(ctx, rec) }()
	reports := make(chan kubeletplugin.DeviceHealthReport, 10)
	wg.Add(1)
	go func() { defer wg.Done(); _ = e.d.WatchHealthStatus(ctx, reports) }()
	if r := <-reports; len(r.Devices) != 57+8 || r.Devices[0].Health != kubeletplugin.HealthStatusHealthy {
		t.Fatalf("first health report: %d devices, %+v", len(r.Devices), r.Devices[0])
	}
	rec.wait(t, func() bool { _, taints := rec.first(1); return rec.count() > 0 && len(taints) == 0 })

	start := time.Now()
	devicetest.SetStatus(t, root, "lpu3", "ECC_ERROR")
	rec.wait(t, func() bool { _, taints := rec.first(1); return len(taints) == 29+1 }) // its 29 arcs and its count device
	t.Logf("arcs tainted %v after the failure", time.Since(start))
	_, taints := rec.first(1)
	if tt := taints["ring0-start3-size1"]; len(tt) != 1 || tt[0].Key != arcslice.TaintKey || tt[0].Value != "lpu3" || tt[0].Effect != resourceapi.DeviceTaintEffectNoSchedule {
		t.Fatalf("taint of lpu3's single arc: %+v", tt)
	}
	if r := e.prepare(claim("u1", arc(3, 1))); r.Err == nil {
		t.Fatal("prepared an arc holding an unhealthy LPU")
	}
	for r := range reports {
		unhealthy := 0
		for _, d := range r.Devices {
			if d.Health == kubeletplugin.HealthStatusUnhealthy {
				unhealthy++
			}
		}
		if unhealthy == 29+1 {
			break
		}
	}
	devicetest.SetStatus(t, root, "lpu3", device.StatusReady)
	rec.wait(t, func() bool { _, taints := rec.first(1); return len(taints) == 0 })
}

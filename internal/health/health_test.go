package health

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/device/devicetest"
)

var (
	good = device.Health{Healthy: true}
	bad  = device.Health{Reason: `status "ECC_ERROR"`}
)

func TestDamper(t *testing.T) {
	tests := map[string]struct {
		failure, recovery int
		probes            []device.Health
		want              []bool // reported Healthy after each probe
		pending           []bool
	}{
		"first probe reported as is": {
			failure: 3, recovery: 3,
			probes: []device.Health{bad}, want: []bool{false}, pending: []bool{false},
		},
		"failure confirmed after threshold": {
			failure: 2, recovery: 2,
			probes:  []device.Health{good, bad, bad},
			want:    []bool{true, true, false},
			pending: []bool{false, true, false},
		},
		"blip is damped": {
			failure: 3, recovery: 2,
			probes:  []device.Health{good, bad, bad, good, bad, bad},
			want:    []bool{true, true, true, true, true, true},
			pending: []bool{false, true, true, false, true, true},
		},
		"recovery needs its own threshold": {
			failure: 1, recovery: 3,
			probes:  []device.Health{good, bad, good, good, good},
			want:    []bool{true, false, false, false, true},
			pending: []bool{false, false, true, true, false},
		},
		"threshold zero means one probe": {
			failure: 0, recovery: 0,
			probes:  []device.Health{good, bad, good},
			want:    []bool{true, false, true},
			pending: []bool{false, false, false},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			d := newDamper(tc.failure, tc.recovery)
			for i, p := range tc.probes {
				got, pending := d.observe("lpu0", p)
				if got.Healthy != tc.want[i] || pending != tc.pending[i] {
					t.Fatalf("probe %d (%v): reported healthy=%v pending=%v, want %v %v", i, p.Healthy, got.Healthy, pending, tc.want[i], tc.pending[i])
				}
				if !got.Healthy && got.Reason == "" {
					t.Fatalf("probe %d: unhealthy without a reason", i)
				}
			}
		})
	}
}

func TestDamperReasonFollowsSameVerdict(t *testing.T) {
	d := newDamper(1, 1)
	d.observe("lpu0", bad)
	other := device.Health{Reason: "device node /dev/lpu0 missing"}
	if got, _ := d.observe("lpu0", other); got.Reason != other.Reason {
		t.Fatalf("reason = %q, want %q", got.Reason, other.Reason)
	}
}

// noEvents is the real Sysfs with nothing to watch, like real sysfs whose
// attributes never send inotify events.
type noEvents struct{ *device.Sysfs }

func (noEvents) WatchPaths() []string { return nil }

// start runs a monitor on root until the test ends.
func start(t *testing.T, root string, opts Options) *Monitor {
	t.Helper()
	return startSource(t, device.NewSysfs(root), opts)
}

func startSource(t *testing.T, src Source, opts Options) *Monitor {
	t.Helper()
	m := New(src, opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	select {
	case <-m.Ready():
	case <-time.After(5 * time.Second):
		t.Fatal("monitor not ready")
	}
	return m
}

// waitFor waits for a snapshot satisfying ok, failing at the deadline.
func waitFor(t *testing.T, m *Monitor, timeout time.Duration, what string, ok func(Snapshot) bool) Snapshot {
	t.Helper()
	deadline := time.After(timeout)
	for {
		snap, changed := m.Snapshot()
		if ok(snap) {
			return snap
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("%s: not within %v; last %s", what, timeout, describe(snap))
		}
	}
}

func describe(s Snapshot) string {
	var b strings.Builder
	for _, d := range s.Inventory.Devices {
		b.WriteString(d.ID)
		if d.Health.Healthy {
			b.WriteString("=ok ")
		} else {
			b.WriteString("=bad(" + d.Health.Reason + ") ")
		}
	}
	return b.String()
}

func healthOf(s Snapshot, id string) (device.Health, bool) {
	d, ok := s.Inventory.Device(id)
	return d.Health, ok
}

func rows(n int) []devicetest.Row {
	r := make([]devicetest.Row, n)
	for i := range r {
		r[i] = devicetest.Row{Index: i}
	}
	return r
}

// eventOnly makes file events the only fast path: no polling, no resync.
var eventOnly = Options{ResyncInterval: time.Hour, PollInterval: -1, ProbeInterval: 20 * time.Millisecond}

func TestMonitorHealthChangesWithinASecond(t *testing.T) {
	tests := map[string]struct {
		opts     Options
		noEvents bool
		break_   func(t *testing.T, root string)
		fix      func(t *testing.T, root string)
		reason   string
	}{
		"bad status via file events": {
			opts:   eventOnly,
			break_: func(t *testing.T, root string) { devicetest.SetStatus(t, root, "lpu2", "ECC_ERROR") },
			fix:    func(t *testing.T, root string) { devicetest.SetStatus(t, root, "lpu2", device.StatusReady) },
			reason: "ECC_ERROR",
		},
		"device node removed via file events": {
			opts:   eventOnly,
			break_: func(t *testing.T, root string) { devicetest.RemoveNode(t, root, "lpu2") },
			fix:    func(t *testing.T, root string) { devicetest.CreateNode(t, root, "lpu2") },
			reason: "/dev/lpu2",
		},
		"bad status via polling (sysfs without events)": {
			opts:     Options{ResyncInterval: time.Hour, PollInterval: 100 * time.Millisecond, ProbeInterval: 20 * time.Millisecond},
			noEvents: true,
			break_: func(t *testing.T, root string) {
				writeInPlace(t, root, "lpu2", "status", "THERMAL_TRIP\n")
			},
			fix:    func(t *testing.T, root string) { writeInPlace(t, root, "lpu2", "status", "READY\n") },
			reason: "THERMAL_TRIP",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			root := devicetest.NewTree(t, rows(4)...)
			var src Source = device.NewSysfs(root)
			if tc.noEvents {
				src = noEvents{device.NewSysfs(root)}
			}
			m := startSource(t, src, tc.opts)
			waitFor(t, m, time.Second, "4 healthy devices", func(s Snapshot) bool {
				return len(s.Inventory.HealthyIDs()) == 4
			})

			tc.break_(t, root)
			began := time.Now()
			snap := waitFor(t, m, time.Second, "lpu2 unhealthy", func(s Snapshot) bool {
				h, ok := healthOf(s, "lpu2")
				return ok && !h.Healthy
			})
			t.Logf("unhealthy after %v", time.Since(began))
			if h, _ := healthOf(snap, "lpu2"); !strings.Contains(h.Reason, tc.reason) {
				t.Fatalf("reason %q does not mention %q", h.Reason, tc.reason)
			}
			if len(snap.Inventory.HealthyIDs()) != 3 {
				t.Fatalf("others changed: %s", describe(snap))
			}

			tc.fix(t, root)
			began = time.Now()
			waitFor(t, m, time.Second, "lpu2 healthy again", func(s Snapshot) bool {
				h, ok := healthOf(s, "lpu2")
				return ok && h.Healthy
			})
			t.Logf("recovered after %v", time.Since(began))
		})
	}
}

func writeInPlace(t *testing.T, root, id, name, content string) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(root, device.ClassDir, id, name), os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(content); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestMonitorDevicesAppearAndGo(t *testing.T) {
	root := devicetest.NewTree(t, rows(2)...)
	m := start(t, root, eventOnly)
	first := waitFor(t, m, time.Second, "2 devices", func(s Snapshot) bool { return len(s.Inventory.Devices) == 2 })
	if first.Layout == nil || len(first.Layout.Rings()) != 1 {
		t.Fatalf("layout = %v, want one ring", first.Layout)
	}

	devicetest.AddDevice(t, root, devicetest.Row{Index: 2, NUMA: "1"})
	snap := waitFor(t, m, time.Second, "lpu2 added", func(s Snapshot) bool { return len(s.Inventory.Devices) == 3 })
	d, _ := snap.Inventory.Device("lpu2")
	if !d.Health.Healthy || d.NUMANode != 1 {
		t.Fatalf("lpu2 = %+v, want healthy on NUMA node 1", d)
	}
	if got := snap.Layout.Rings(); len(got) != 1 || len(got[0]) != 3 {
		t.Fatalf("rings = %v, want one ring of 3", got)
	}

	if err := os.RemoveAll(filepath.Join(root, device.ClassDir, "lpu0")); err != nil {
		t.Fatal(err)
	}
	snap = waitFor(t, m, time.Second, "lpu0 gone", func(s Snapshot) bool {
		_, ok := s.Inventory.Device("lpu0")
		return !ok
	})
	if got := snap.Layout.Rings(); len(got) != 1 || len(got[0]) != 2 {
		t.Fatalf("rings after removal = %v, want one ring of 2", got)
	}
}

func TestMonitorDiscoveryErrorKeepsInventory(t *testing.T) {
	root := devicetest.NewTree(t, rows(2)...)
	m := start(t, root, Options{ResyncInterval: 50 * time.Millisecond, PollInterval: -1, ProbeInterval: 20 * time.Millisecond})
	waitFor(t, m, time.Second, "2 devices", func(s Snapshot) bool { return len(s.Inventory.Devices) == 2 })

	// Hide the class directory: discovery fails (no driver); the devices
	// are still probed and turn unhealthy rather than vanishing silently.
	class := filepath.Join(root, device.ClassDir)
	if err := os.Rename(class, class+".hidden"); err != nil {
		t.Fatal(err)
	}
	snap := waitFor(t, m, 2*time.Second, "discovery error", func(s Snapshot) bool {
		return s.Err != nil && len(s.Inventory.HealthyIDs()) == 0
	})
	if len(snap.Inventory.Devices) != 2 {
		t.Fatalf("devices = %s, want both kept", describe(snap))
	}
	if err := os.Rename(class+".hidden", class); err != nil {
		t.Fatal(err)
	}
	waitFor(t, m, 2*time.Second, "recovered", func(s Snapshot) bool {
		return s.Err == nil && len(s.Inventory.HealthyIDs()) == 2
	})
}

// A device that vanishes is kept, still reported with its last health,
// until a second scan confirms it gone. When the driver goes away in
// between (the devices go first, then /sys/class/lpu), no scan succeeds
// any more: the vanished device must still turn unhealthy like the others
// rather than stay advertised as healthy for as long as discovery fails.
func TestMonitorDeviceGoneThenDriverGone(t *testing.T) {
	root := devicetest.NewTree(t, rows(2)...)
	m := start(t, root, Options{ResyncInterval: time.Hour, PollInterval: -1, ProbeInterval: 300 * time.Millisecond})
	waitFor(t, m, time.Second, "2 healthy devices", func(s Snapshot) bool { return len(s.Inventory.HealthyIDs()) == 2 })

	class := filepath.Join(root, device.ClassDir)
	if err := os.RemoveAll(filepath.Join(class, "lpu1")); err != nil {
		t.Fatal(err)
	}
	// Gone but not confirmed: lpu1 is kept on a ring of its own.
	waitFor(t, m, time.Second, "lpu1 pending removal", func(s Snapshot) bool {
		for _, r := range s.Inventory.Rings {
			if len(r) == 1 && r[0] == "lpu1" {
				return true
			}
		}
		return false
	})
	if err := os.Rename(class, class+".hidden"); err != nil {
		t.Fatal(err)
	}
	snap := waitFor(t, m, 2*time.Second, "no healthy device while the driver is gone", func(s Snapshot) bool {
		return s.Err != nil && len(s.Inventory.HealthyIDs()) == 0
	})
	if h, ok := healthOf(snap, "lpu1"); ok && !strings.Contains(h.Reason, goneReason) {
		t.Fatalf("lpu1 = %+v, want reason %q", h, goneReason)
	}
}

func TestMonitorBrokenAttributesAtStart(t *testing.T) {
	root := devicetest.NewTree(t,
		devicetest.Row{Index: 0},
		devicetest.Row{Index: 1, Omit: []string{"status"}},
		devicetest.Row{Index: 2, Dev: "garbage"},
		devicetest.Row{Index: 3, NoNode: true},
	)
	m := start(t, root, eventOnly)
	snap, _ := m.Snapshot()
	want := map[string]string{"lpu0": "", "lpu1": "status", "lpu2": "dev", "lpu3": "/dev/lpu3"}
	for id, reason := range want {
		h, ok := healthOf(snap, id)
		if !ok {
			t.Fatalf("%s not listed: broken devices must be reported, not dropped", id)
		}
		if h.Healthy != (reason == "") || !strings.Contains(h.Reason, reason) {
			t.Fatalf("%s = %+v, want healthy=%v with reason mentioning %q", id, h, reason == "", reason)
		}
	}
}

func TestMonitorDampsABlip(t *testing.T) {
	root := devicetest.NewTree(t, rows(2)...)
	m := start(t, root, Options{ResyncInterval: time.Hour, PollInterval: -1, ProbeInterval: 500 * time.Millisecond, FailureThreshold: 3})
	_, changed := m.Snapshot()
	devicetest.SetStatus(t, root, "lpu1", "ECC_ERROR")
	time.Sleep(30 * time.Millisecond)
	devicetest.SetStatus(t, root, "lpu1", device.StatusReady)
	// Three confirming probes 500 ms apart would be needed; the blip is
	// gone after the first. Nothing may be published as unhealthy.
	deadline := time.After(1500 * time.Millisecond)
	for {
		select {
		case <-changed:
			var snap Snapshot
			snap, changed = m.Snapshot()
			if h, _ := healthOf(snap, "lpu1"); !h.Healthy {
				t.Fatalf("blip reported: %s", describe(snap))
			}
		case <-deadline:
			return
		}
	}
}

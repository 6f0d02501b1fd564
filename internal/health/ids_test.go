package health

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/device/devicesim"
)

// countingSysfs is the real Sysfs that also counts its discoveries and
// keeps, for each one, which card every ID named.
type countingSysfs struct {
	*device.Sysfs

	mu    sync.Mutex
	scans int
	seen  []map[string]string // ID -> card address, per discovery
}

func (c *countingSysfs) Discover(ctx context.Context) (*device.Inventory, error) {
	inv, err := c.Sysfs.Discover(ctx)
	if err == nil {
		c.mu.Lock()
		c.scans++
		c.seen = append(c.seen, idAddresses(inv))
		c.mu.Unlock()
	}
	return inv, err
}

func (c *countingSysfs) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.scans
}

func idAddresses(inv *device.Inventory) map[string]string {
	m := make(map[string]string, len(inv.Devices))
	for _, d := range inv.Devices {
		m[d.ID] = d.PCIBusID
	}
	return m
}

// TestMonitorKeepsIDsOverUnbindRebind: on a simulated Orion node a card
// whose user function is unbound from xocl at run time and bound again,
// three times over, keeps its ID and every other card's, in every
// discovery the monitor makes and in every snapshot it reports; the card
// is reported unhealthy, naming the missing binding, while unbound.
func TestMonitorKeepsIDsOverUnbindRebind(t *testing.T) {
	root := t.TempDir()
	spec := devicesim.Spec{Devices: 4, Rings: 1, Backend: device.BackendXilinx}
	simulate := func(faults map[int]devicesim.Fault) {
		t.Helper()
		spec.Faults = faults
		if err := devicesim.Write(root, spec); err != nil {
			t.Fatal(err)
		}
	}
	simulate(nil)
	src := &countingSysfs{Sysfs: device.NewSysfs(root, device.WithStateDir(t.TempDir()), device.WithLogger(slog.New(slog.DiscardHandler)),
		device.WithDiscovery(device.Discovery{Backend: device.BackendXilinx, Xilinx: device.XilinxOptions{Shell: device.DefaultXilinxShell}}))}
	m := startSource(t, src, Options{ResyncInterval: 30 * time.Millisecond, PollInterval: 10 * time.Millisecond,
		ProbeInterval: 10 * time.Millisecond, FailureThreshold: 1, RecoveryThreshold: 1})

	first := waitFor(t, m, 2*time.Second, "4 healthy cards", func(s Snapshot) bool { return len(s.Inventory.HealthyIDs()) == 4 })
	want := idAddresses(first.Inventory)
	for i := range 4 {
		if want[device.ID(i)] != devicesim.XilinxAddress(i) {
			t.Fatalf("first discovery %v: want lpuN on the N-th card", want)
		}
	}
	// checked holds the monitor to want in every snapshot it is waited on.
	checked := func(what string, ok func(Snapshot) bool) func(Snapshot) bool {
		return func(s Snapshot) bool {
			if got := idAddresses(s.Inventory); !maps.Equal(got, want) {
				t.Fatalf("%s: snapshot %d has IDs %v, want %v", what, s.Generation, got, want)
			}
			return ok(s)
		}
	}
	// rescans waits for n more discoveries with the state unchanged.
	rescans := func(what string, n int, ok func(Snapshot) bool) {
		t.Helper()
		from := src.count()
		waitFor(t, m, 5*time.Second, what, checked(what, ok))
		deadline := time.Now().Add(5 * time.Second)
		for src.count() < from+n {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d rescans in 5s, want %d", what, src.count()-from, n)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if s, _ := m.Snapshot(); !checked(what, ok)(s) {
			t.Fatalf("%s: state lost after %d rescans: %s", what, n, describe(s))
		}
	}
	unbound := func(s Snapshot) bool {
		h, ok := healthOf(s, "lpu1")
		return ok && !h.Healthy && strings.Contains(h.Reason, "not bound to xocl") && len(s.Inventory.HealthyIDs()) == 3
	}
	bound := func(s Snapshot) bool { return len(s.Inventory.HealthyIDs()) == 4 }
	for round := range 3 {
		simulate(map[int]devicesim.Fault{1: devicesim.Unbound})
		rescans(fmt.Sprintf("round %d, card 1 unbound", round), 3, unbound)
		simulate(nil)
		rescans(fmt.Sprintf("round %d, card 1 rebound", round), 3, bound)
	}

	src.mu.Lock()
	defer src.mu.Unlock()
	if src.scans < 18 {
		t.Fatalf("%d discoveries, want at least 18", src.scans)
	}
	for i, got := range src.seen {
		if !maps.Equal(got, want) {
			t.Fatalf("discovery %d gave IDs %v, want %v", i, got, want)
		}
	}
}

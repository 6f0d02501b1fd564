// Package healthtest gives tests a health.Source whose snapshot never
// changes, and the healthy one-ring inventory most of them use.
package healthtest

import (
	"fmt"
	"testing"

	"github.com/hyperaccel/lpu-node/internal/health"
	"github.com/hyperaccel/lpu-node/pkg/alloc"
	"github.com/hyperaccel/lpu-node/pkg/device"
)

// Static is a health.Source with one fixed snapshot (generation 1).
type Static struct{ snap health.Snapshot }

// New returns inv as a fixed snapshot; rings the layout refuses fail t.
func New(t testing.TB, inv *device.Inventory) Static {
	t.Helper()
	l, err := alloc.NewLayout(inv.Rings)
	if err != nil {
		t.Fatal(err)
	}
	return Static{snap: health.Snapshot{Inventory: inv, Layout: l, Generation: 1}}
}

// Snapshot returns the fixed snapshot and a channel that never fires.
func (s Static) Snapshot() (health.Snapshot, <-chan struct{}) { return s.snap, nil }

// Ring is one healthy ring of n LPUs, /dev/lpu0 to /dev/lpu<n-1> on major
// 240, model LPU-X1, firmware 2.0.1, NUMA node 0, driver version 1.4.2.
func Ring(n int) *device.Inventory {
	inv := &device.Inventory{DriverVersion: "1.4.2"}
	var ring []string
	for i := range n {
		inv.Devices = append(inv.Devices, device.Device{ID: device.ID(i), Index: i, Path: fmt.Sprintf("/dev/lpu%d", i),
			Major: 240, Minor: int64(i), Model: "LPU-X1", Firmware: "2.0.1", Health: device.Health{Healthy: true}})
		ring = append(ring, device.ID(i))
	}
	inv.Rings = [][]string{ring}
	return inv
}

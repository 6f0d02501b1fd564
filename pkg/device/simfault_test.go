package device_test

import (
	"context"
	"strings"
	"testing"

	"github.com/hyperaccel/lpu-node/pkg/device"
)

// TestSimulateOrionFaults: the simulator writes an unbound user function
// and a card mid hot reset as the kernel shows them; discovery keeps every
// ID and names the state; a rerun without faults restores the cards.
func TestSimulateOrionFaults(t *testing.T) {
	root := t.TempDir()
	spec := device.SimSpec{Devices: 4, Rings: 1, Backend: device.BackendXilinx,
		Faults: map[int]device.SimFault{1: device.SimUnbound, 2: device.SimHotReset}}
	must(t, device.Simulate(root, spec))
	s := xilinx(root)
	inv, err := s.Discover(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"lpu1": "user function 0000:18:00.1 not bound to xocl",
		"lpu2": "/sys/bus/pci/devices/0000:31:00.1/ready missing",
	}
	for i, d := range inv.Devices {
		if d.PCIBusID != device.SimXilinxAddress(i) {
			t.Fatalf("%s at %s, want %s", d.ID, d.PCIBusID, device.SimXilinxAddress(i))
		}
		if r, bad := want[d.ID]; bad != !d.Health.Healthy || bad && !strings.Contains(d.Health.Reason, r) {
			t.Errorf("%s health %+v, want reason %q", d.ID, d.Health, r)
		}
	}
	if !strings.Contains(inv.Devices[2].Health.Reason, "render node missing") {
		t.Errorf("hot reset: %s", inv.Devices[2].Health.Reason)
	}
	spec.Faults = nil
	must(t, device.Simulate(root, spec))
	inv, err = s.Discover(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := len(inv.HealthyIDs()); got != 4 {
		t.Fatalf("%d healthy after the faults were cleared: %+v", got, inv.Devices)
	}
	if err := device.Simulate(t.TempDir(), device.SimSpec{Devices: 2, Rings: 1, Faults: map[int]device.SimFault{0: device.SimUnbound}}); err == nil {
		t.Fatal("a fault on an lpu node was accepted")
	}
}

package devicesim_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/device/devicesim"
)

// TestOrionFaults: the simulator writes an unbound user function
// and a card mid hot reset as the kernel shows them; discovery keeps every
// ID and names the state; a rerun without faults restores the cards.
func TestOrionFaults(t *testing.T) {
	root := t.TempDir()
	spec := devicesim.Spec{Devices: 4, Rings: 1, Backend: device.BackendXilinx,
		Faults: map[int]devicesim.Fault{1: devicesim.Unbound, 2: devicesim.HotReset}}
	must(t, devicesim.Write(root, spec))
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
		if d.PCIBusID != devicesim.XilinxAddress(i) {
			t.Fatalf("%s at %s, want %s", d.ID, d.PCIBusID, devicesim.XilinxAddress(i))
		}
		if r, bad := want[d.ID]; bad != !d.Health.Healthy || bad && !strings.Contains(d.Health.Reason, r) {
			t.Errorf("%s health %+v, want reason %q", d.ID, d.Health, r)
		}
	}
	if !strings.Contains(inv.Devices[2].Health.Reason, "render node missing") {
		t.Errorf("hot reset: %s", inv.Devices[2].Health.Reason)
	}
	spec.Faults = nil
	must(t, devicesim.Write(root, spec))
	inv, err = s.Discover(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := len(inv.HealthyIDs()); got != 4 {
		t.Fatalf("%d healthy after the faults were cleared: %+v", got, inv.Devices)
	}
	if err := devicesim.Write(t.TempDir(), devicesim.Spec{Devices: 2, Rings: 1, Faults: map[int]devicesim.Fault{0: devicesim.Unbound}}); err == nil {
		t.Fatal("a fault on an lpu node was accepted")
	}
}

// TestSimulatedPCIFunctionsHaveSubsystemIDs: every simulated PCI function,
// an unbound one too, has the attributes the PCI core always writes and
// Node Feature Discovery's PCI source requires (it skips a function that
// lacks one): vendor, device, class, subsystem_vendor, subsystem_device.
func TestSimulatedPCIFunctionsHaveSubsystemIDs(t *testing.T) {
	specs := map[string]devicesim.Spec{
		"orion":  {Devices: 4, Rings: 1, Backend: device.BackendXilinx, Faults: map[int]devicesim.Fault{1: devicesim.Unbound}},
		"bertha": {Devices: 4, Rings: 1, Backend: device.BackendPCI},
	}
	for name, spec := range specs {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			must(t, devicesim.Write(root, spec))
			fns, err := filepath.Glob(filepath.Join(root, device.PCIDevicesDir, "*"))
			if err != nil || len(fns) < spec.Devices {
				t.Fatalf("%d functions under %s (err %v), want at least %d", len(fns), device.PCIDevicesDir, err, spec.Devices)
			}
			for _, fn := range fns {
				for _, attr := range []string{"vendor", "device", "class", "subsystem_vendor", "subsystem_device"} {
					b, err := os.ReadFile(filepath.Join(fn, attr))
					if err != nil {
						t.Errorf("%s: %v", filepath.Base(fn), err)
						continue
					}
					if v := strings.TrimSpace(string(b)); !strings.HasPrefix(v, "0x") || len(v) < 6 {
						t.Errorf("%s/%s = %q, want 0x and hex digits", filepath.Base(fn), attr, v)
					}
				}
			}
		})
	}
}

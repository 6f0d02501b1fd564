package device_test

import (
	"context"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/device/devicesim"
)

// unbind makes a simulated Orion user function look as it does when xocl
// is not bound to it (probe failure, unbind, late bind): only the PCI
// core's attributes stay; user_pf, ready, the subdevices, the render node
// and the driver link go.
func unbind(t *testing.T, root, addr string) {
	t.Helper()
	dir := fn(root, addr)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		switch e.Name() {
		case "vendor", "device", "class", "numa_node":
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
}

// rebind restores every simulated card (Simulate is idempotent).
func rebind(t *testing.T, root string, n int) {
	t.Helper()
	if err := devicesim.Write(root, devicesim.Spec{Devices: n, Rings: 1, Backend: device.BackendXilinx}); err != nil {
		t.Fatal(err)
	}
}

// addresses maps each discovered ID to its card's primary address.
func addresses(t *testing.T, s *device.Sysfs) map[string]string {
	t.Helper()
	inv, err := s.Discover(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, d := range inv.Devices {
		m[d.ID] = d.PCIBusID
	}
	return m
}

func TestXilinxIDsByCardAddress(t *testing.T) {
	mgmt2 := devicesim.XilinxAddress(2)[:10] + ".0"
	tests := map[string]struct {
		setup   func(t *testing.T, root string)
		primary string // lpu2's primary address
		reason  string // in lpu2's reason
		absent  string // not in lpu2's reason
	}{
		"user function not bound to xocl": {
			setup:   func(t *testing.T, root string) { unbind(t, root, card2) },
			primary: card2,
			reason:  "user function 0000:31:00.1 not bound to xocl",
			absent:  "no shell flashed",
		},
		"no user function on the bus: no shell flashed, same rank": {
			setup:   func(t *testing.T, root string) { rm(t, fn(root, card2)) },
			primary: mgmt2,
			reason:  "no shell flashed: card 0000:31:00 has management function 0000:31:00.0 but no user function",
		},
		"management function not bound to xclmgmt": {
			setup: func(t *testing.T, root string) {
				rm(t, fn(root, mgmt2)+"/mgmt_pf")
				rm(t, fn(root, mgmt2)+"/instance")
			},
			primary: card2,
			reason:  "management function 0000:31:00.0 not bound to xclmgmt",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			root := orion(t, 4)
			tc.setup(t, root)
			s := xilinx(root)
			inv, err := s.Discover(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if len(inv.Devices) != 4 {
				t.Fatalf("%d devices, want 4", len(inv.Devices))
			}
			for i, d := range inv.Devices {
				want := devicesim.XilinxAddress(i)
				if i == 2 {
					want = tc.primary
				}
				if d.ID != device.ID(i) || d.PCIBusID != want {
					t.Fatalf("device %d is %s at %s, want %s at %s (IDs follow card addresses)", i, d.ID, d.PCIBusID, device.ID(i), want)
				}
				if i != 2 && !d.Health.Healthy {
					t.Errorf("%s unhealthy: %s", d.ID, d.Health.Reason)
				}
			}
			h := inv.Devices[2].Health
			if h.Healthy || !strings.Contains(h.Reason, tc.reason) || tc.absent != "" && strings.Contains(h.Reason, tc.absent) {
				t.Fatalf("lpu2 health %+v, want a reason with %q", h, tc.reason)
			}
		})
	}
}

// TestXilinxIDsStableOverRescans is the monitor's view: a card unbound and
// rebound at run time, again and again, keeps every ID; a restart with a
// card gone from the bus keeps the others' IDs (the persisted map); and the
// map is on disk.
func TestXilinxIDsStableOverRescans(t *testing.T) {
	root := orion(t, 4)
	state := t.TempDir()
	s := xilinx(root, device.WithStateDir(state))
	want := addresses(t, s)
	card1 := devicesim.XilinxAddress(1)
	for round := 0; round < 3; round++ {
		unbind(t, root, card1)
		if got := addresses(t, s); !maps.Equal(got, want) {
			t.Fatalf("round %d, card 1 unbound: IDs %v, want %v", round, got, want)
		}
		if h := s.ProbeHealth("lpu1"); h.Healthy || !strings.Contains(h.Reason, "not bound to xocl") {
			t.Fatalf("round %d: lpu1 unbound but %+v", round, h)
		}
		rebind(t, root, 4)
		if got := addresses(t, s); !maps.Equal(got, want) {
			t.Fatalf("round %d, card 1 rebound: IDs %v, want %v", round, got, want)
		}
		if h := s.ProbeHealth("lpu1"); !h.Healthy {
			t.Fatalf("round %d: lpu1 rebound but %+v", round, h)
		}
	}

	// A restart while card 1 is off the bus: the others keep their IDs.
	rm(t, fn(root, card1))
	rm(t, fn(root, card1[:10]+".0"))
	got := addresses(t, xilinx(root, device.WithStateDir(state)))
	delete(want, "lpu1")
	if !maps.Equal(got, want) {
		t.Fatalf("after a restart without card 1: IDs %v, want %v", got, want)
	}

	var f struct {
		IDs map[string]string `json:"ids"`
	}
	data, err := os.ReadFile(filepath.Join(state, "device-ids-xilinx.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &f); err != nil || f.IDs[card1[:10]] != "lpu1" || len(f.IDs) != 4 {
		t.Fatalf("persisted map %s (%v), want 4 cards with %s = lpu1", data, err, card1[:10])
	}
}

// TestXilinxNewCardGetsANewID: a card that appears after the first
// discovery takes the next ID, even when its address sorts first; no ID is
// given to another card.
func TestXilinxNewCardGetsANewID(t *testing.T) {
	root := orion(t, 4)
	card0 := devicesim.XilinxAddress(0)
	rm(t, fn(root, card0))
	rm(t, fn(root, card0[:10]+".0"))
	s := xilinx(root, device.WithStateDir(t.TempDir()))
	first := addresses(t, s)
	for i := 1; i < 4; i++ {
		if first[device.ID(i-1)] != devicesim.XilinxAddress(i) {
			t.Fatalf("first discovery %v: want cards 1..3 as lpu0..lpu2", first)
		}
	}
	rebind(t, root, 4)
	got := addresses(t, s)
	first["lpu3"] = card0
	if !maps.Equal(got, first) {
		t.Fatalf("after card 0 appeared: %v, want %v", got, first)
	}
}

// TestPCIIDsStableAcrossRestarts: a Bertha function gone from the bus at
// a restart does not shift the others' IDs.
func TestPCIIDsStableAcrossRestarts(t *testing.T) {
	root, _ := pciNode(t, 3)
	state := t.TempDir()
	pci := func() *device.Sysfs {
		return device.NewSysfs(root, device.WithLogger(quiet), device.WithStateDir(state),
			device.WithDiscovery(device.Discovery{Backend: device.BackendPCI}))
	}
	want := addresses(t, pci())
	rm(t, fn(root, devicesim.PCIAddress(0)))
	delete(want, "lpu0")
	if got := addresses(t, pci()); !maps.Equal(got, want) {
		t.Fatalf("after a restart without function 0: %v, want %v", got, want)
	}
}

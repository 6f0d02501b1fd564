package device_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/device/devicesim"
	"github.com/hyperaccel/lpu-node/pkg/device/devicetest"
)

// TestMajorRegisteredToDriver (issue 22 item 6): a device number sysfs and
// /dev agree on is still not an LPU's unless /proc/devices registers its
// major under the driver's name. dev = 1:1 with /dev/lpu3 = c 1:1 is
// /dev/mem.
func TestMajorRegisteredToDriver(t *testing.T) {
	tests := map[string]struct {
		dev       string
		mknod     bool   // a real c 1:1 node (needs CAP_MKNOD), else a stand-in
		procExtra string // written instead of the tree's /proc/devices when not ""
		reason    string // "" healthy
	}{
		"lpu major":                 {dev: "509:3"},
		"/dev/mem, a real node":     {dev: "1:1", mknod: true, reason: "major 1 of /dev/lpu3 is registered to mem in /proc/devices, want driver lpu"},
		"/dev/mem, a stand-in":      {dev: "1:1", reason: "major 1 of /dev/lpu3 is registered to mem in /proc/devices, want driver lpu"},
		"unregistered major":        {dev: "300:3", procExtra: "Character devices:\n  1 mem\n", reason: "major 300 of /dev/lpu3 is not registered in /proc/devices, want driver lpu"},
		"/proc/devices unreadable":  {dev: "509:3", procExtra: "-", reason: "major 509 of /dev/lpu3: /proc/devices missing"},
		"registered twice, one lpu": {dev: "509:3", procExtra: "Character devices:\n509 other\n509 lpu\nBlock devices:\n509 lpu_blk\n"},
		"block major is no char":    {dev: "7:3", procExtra: "Character devices:\n  1 mem\nBlock devices:\n  7 lpu\n", reason: "major 7 of /dev/lpu3 is not registered"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			root := devicetest.NewTree(t, devicetest.Row{Index: 3, Dev: "509:3"})
			devicetest.WriteAttr(t, root, "lpu3", "dev", tc.dev+"\n")
			proc := filepath.Join(root, device.ProcDevices)
			switch tc.procExtra {
			case "":
			case "-":
				must(t, os.Remove(proc))
			default:
				write(t, proc, tc.procExtra)
			}
			if tc.mknod {
				node := filepath.Join(root, "dev/lpu3")
				rm(t, node)
				if err := unix.Mknod(node, unix.S_IFCHR|0o600, int(unix.Mkdev(1, 1))); err != nil {
					t.Skipf("mknod: %v", err)
				}
			}
			s := device.NewSysfs(root, device.WithLogger(quiet))
			inv, err := s.Discover(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			h := inv.Devices[0].Health
			if tc.reason == "" && !h.Healthy || tc.reason != "" && (h.Healthy || !strings.Contains(h.Reason, tc.reason)) {
				t.Fatalf("health %+v, want reason %q", h, tc.reason)
			}
			if p := s.ProbeHealth("lpu3"); p != h {
				t.Fatalf("ProbeHealth %+v, Discover %+v", p, h)
			}
		})
	}
}

// TestMajorRegisteredXilinxAndPCI: the render node's major must be drm's,
// the management node's xclmgmt's, a Bertha node's its driver's (the bound
// one, or discovery.pci.driver).
func TestMajorRegisteredXilinxAndPCI(t *testing.T) {
	orionProc := "Character devices:\n226 drm\n235 other\n"
	tests := map[string]struct {
		backend string
		opts    device.PCIOptions
		proc    string
		reason  string
	}{
		"xilinx: simulated /proc/devices": {backend: device.BackendXilinx},
		"xilinx: xclmgmt's major taken by another driver": {backend: device.BackendXilinx, proc: orionProc,
			reason: "major 235 of /dev/xclmgmt6144 is registered to other in /proc/devices, want driver xclmgmt"},
		"xilinx: no drm": {backend: device.BackendXilinx, proc: "Character devices:\n235 xclmgmt\n",
			reason: "major 226 of /dev/dri/renderD129 is not registered in /proc/devices, want driver drm"},
		"pci: the bound driver":      {backend: device.BackendPCI},
		"pci: the configured driver": {backend: device.BackendPCI, opts: device.PCIOptions{Driver: "bertha"}, reason: "major 236 of /dev/ha1 is registered to ha in /proc/devices, want driver bertha"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			must(t, devicesim.Write(root, devicesim.Spec{Devices: 3, Rings: 1, Backend: tc.backend}))
			if tc.proc != "" {
				write(t, filepath.Join(root, device.ProcDevices), tc.proc)
			}
			inv, err := device.NewSysfs(root, device.WithLogger(quiet),
				device.WithDiscovery(device.Discovery{Backend: tc.backend, PCI: tc.opts})).Discover(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			h := inv.Devices[1].Health
			if tc.reason == "" && !h.Healthy || tc.reason != "" && (h.Healthy || !strings.Contains(h.Reason, tc.reason)) {
				t.Fatalf("lpu1 health %+v, want reason %q", h, tc.reason)
			}
		})
	}
}

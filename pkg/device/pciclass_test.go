package device_test

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/device/devicesim"
)

// TestPCIClassDirScanned: Bertha's class directory is not public, so by
// default the function's subdirectories are scanned for <dir>/<name>/dev
// (real directories with plain names only, never a link such as driver);
// classDir stays an explicit override.
func TestPCIClassDirScanned(t *testing.T) {
	addr1 := devicesim.PCIAddress(1)
	tests := map[string]struct {
		classDir string
		setup    func(t *testing.T, root string)
		reason   string // "" healthy with /dev/ha1
		logged   string
	}{
		"default: the simulated ha directory is found": {logged: `classDir=ha`},
		"default: another name is found": {
			setup:  func(t *testing.T, root string) { must(t, os.Rename(fn(root, addr1)+"/ha", fn(root, addr1)+"/bertha")) },
			logged: `classDir=bertha`,
		},
		"default: a link to a directory with a node is not followed": {
			setup: func(t *testing.T, root string) {
				must(t, os.Rename(fn(root, addr1)+"/ha", fn(root, addr1)+"/.hidden"))
				must(t, os.Symlink(".hidden", fn(root, addr1)+"/zlink"))
			},
			reason: "device node unknown: /sys/bus/pci/devices/0000:3c:00.0 has no <dir>/<name>/dev",
		},
		"override names another directory": {
			classDir: "bertha",
			reason:   "device node unknown: /sys/bus/pci/devices/0000:3c:00.0/bertha has no directory with a dev attribute",
		},
		"override names the directory": {classDir: "ha"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			root, _ := pciNode(t, 3)
			if tc.setup != nil {
				tc.setup(t, root)
			}
			var logs bytes.Buffer
			log := slog.New(slog.NewTextHandler(&logs, nil))
			s := device.NewSysfs(root, device.WithLogger(log),
				device.WithDiscovery(device.Discovery{Backend: device.BackendPCI, PCI: device.PCIOptions{ClassDir: tc.classDir}}))
			inv, err := s.Discover(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			d := inv.Devices[1]
			if tc.reason == "" && (!d.Health.Healthy || d.Path != "/dev/ha1") {
				t.Fatalf("lpu1 %+v, want healthy /dev/ha1", d)
			}
			if tc.reason != "" && (d.Health.Healthy || !strings.Contains(d.Health.Reason, tc.reason)) {
				t.Fatalf("lpu1 health %+v, want %q", d.Health, tc.reason)
			}
			if tc.logged != "" && !strings.Contains(logs.String(), tc.logged) {
				t.Fatalf("log does not name the directory found (%s):\n%s", tc.logged, logs.String())
			}
		})
	}
}

package device_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hyperaccel/lpu-node/pkg/device"
)

// TestStandInNodesOnlyWhenSimulated: a tree under a root other than "/"
// whose /dev/lpu0 is a regular file is a real root (the DaemonSet's /host)
// unless it is marked simulated: the LPU is unhealthy there.
func TestStandInNodesOnlyWhenSimulated(t *testing.T) {
	tests := map[string]struct {
		opts    []device.Option
		healthy bool
	}{
		"real root, not /":         {},
		"simulated (--simulate)":   {opts: []device.Option{device.WithSimulated()}, healthy: true},
		"real root, other options": {opts: []device.Option{device.WithStateDir(t.TempDir())}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir() // written by hand: neither Simulate nor devicetest marks it
			write(t, filepath.Join(root, device.ClassDir, "lpu0", "dev"), "509:0\n")
			write(t, filepath.Join(root, device.ClassDir, "lpu0", "status"), "READY\n")
			write(t, filepath.Join(root, "/dev/lpu0"), "")
			write(t, filepath.Join(root, device.ProcDevices), "Character devices:\n509 lpu\n")
			opts := append([]device.Option{device.WithLogger(quiet)}, tc.opts...)
			inv, err := device.NewSysfs(root, opts...).Discover(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			h := inv.Devices[0].Health
			if h.Healthy != tc.healthy || !tc.healthy && !strings.Contains(h.Reason, "/dev/lpu0 is not a character device but a regular file") {
				t.Fatalf("health %+v, want healthy %v", h, tc.healthy)
			}
		})
	}
}

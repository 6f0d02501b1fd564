package devicesim_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/hyperaccel/lpu-node/pkg/device"
)

// quiet drops discovery's warnings: the trees under test hold distractors.
var quiet = slog.New(slog.DiscardHandler)

// discover runs discovery of the lpu backend (or opts') on root.
func discover(t *testing.T, root string, opts ...device.Option) *device.Inventory {
	t.Helper()
	inv, err := device.NewSysfs(root, append([]device.Option{device.WithLogger(quiet)}, opts...)...).Discover(context.Background())
	if err != nil {
		t.Fatalf("Discover: %v", err)
	}
	return inv
}

// xilinx is a discoverer of the xilinx backend (Orion) on root.
func xilinx(root string) *device.Sysfs {
	return device.NewSysfs(root, device.WithLogger(quiet),
		device.WithDiscovery(device.Discovery{Backend: device.BackendXilinx, Xilinx: device.XilinxOptions{Shell: device.DefaultXilinxShell}}))
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

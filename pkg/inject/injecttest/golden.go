package injecttest

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"testing"

	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/device/devicesim"
	"github.com/hyperaccel/lpu-node/pkg/device/devicetest"
	"github.com/hyperaccel/lpu-node/pkg/inject"
)

// GoldenLayout is one node layout the golden tests render: pkg/inject to
// its CDI spec, lpu-nri's nriedit to the NRI adjustment, checked against
// the same CDI spec, so both render the same device set.
type GoldenLayout struct {
	// Setup discovers the node under a temp dir, so that any
	// discovery-root path leaking into an output shows up, and returns
	// the devices of IDs in that order with the injection options.
	Setup func(tb testing.TB) (root string, inv *device.Inventory, devs []device.Device, opts inject.Options)
	// IDs is the allocated device set, in ring order.
	IDs []string
	// Suffix ends the layout's golden file names ("" for lpu).
	Suffix string
}

// GoldenLayouts are the golden tests' layouts by name: "lpu", our own one
// node per LPU (a 4-LPU wrap-around arc on a ring of 8, arc start first),
// and "xilinx", Orion's two nodes per LPU, render and management (a 2-LPU
// wrap-around arc on devicesim's Orion ring of four, lpu0 lpu1 lpu3 lpu2).
func GoldenLayouts() map[string]GoldenLayout {
	return map[string]GoldenLayout{
		"lpu":    {Setup: goldenSetup, IDs: goldenIDs, Suffix: ""},
		"xilinx": {Setup: goldenSetupOrion, IDs: goldenOrionIDs, Suffix: "-xilinx"},
	}
}

var (
	goldenIDs      = []string{"lpu6", "lpu7", "lpu0", "lpu1"}
	goldenOrionIDs = []string{"lpu2", "lpu0"}
)

// goldenSetupOrion discovers an Orion node of four cards devicesim wrote, with the
// xilinx backend and picks goldenOrionIDs.
func goldenSetupOrion(tb testing.TB) (root string, inv *device.Inventory, devs []device.Device, opts inject.Options) {
	tb.Helper()
	root = tb.TempDir()
	if err := devicesim.Write(root, devicesim.Spec{Devices: 4, Rings: 1, Backend: device.BackendXilinx}); err != nil {
		tb.Fatal(err)
	}
	inv, err := device.NewSysfs(root, device.WithDiscovery(device.Discovery{Backend: device.BackendXilinx}),
		device.WithNetworkTable(device.DefaultNetworkTable)).Discover(context.Background())
	if err != nil {
		tb.Fatalf("discover: %v", err)
	}
	for _, id := range goldenOrionIDs {
		d, ok := inv.Device(id)
		if !ok || len(d.Nodes) != 2 {
			tb.Fatalf("%s: %+v, want a discovered LPU with two nodes", id, d)
		}
		devs = append(devs, d)
	}
	return root, inv, devs, inject.Options{Mounts: []inject.Mount{{HostPath: "/opt/xilinx/xrt"}}}
}

// goldenSetup discovers a fake 8-LPU node (one ring) and picks goldenIDs.
func goldenSetup(tb testing.TB) (root string, inv *device.Inventory, devs []device.Device, opts inject.Options) {
	tb.Helper()
	var rows []devicetest.Row
	for i := range 8 {
		rows = append(rows, devicetest.Row{Index: i})
	}
	root = devicetest.NewTree(tb, rows...)
	ring := []string{"lpu0", "lpu1", "lpu2", "lpu3", "lpu4", "lpu5", "lpu6", "lpu7"}
	inv, err := device.NewSysfs(root, device.WithRings([][]string{ring})).Discover(context.Background())
	if err != nil {
		tb.Fatalf("discover: %v", err)
	}
	for _, id := range goldenIDs {
		d, ok := inv.Device(id)
		if !ok {
			tb.Fatalf("%s not discovered", id)
		}
		devs = append(devs, d)
	}
	opts = inject.Options{
		Mounts: []inject.Mount{{HostPath: "/usr/lib/lpu"}, {HostPath: "/opt/lpu/bin", ContainerPath: "/usr/local/lpu/bin"}},
		Env:    map[string]string{"LPU_LOG_LEVEL": "info"},
	}
	return root, inv, devs, opts
}

// GoldenJSON is v as the golden files hold it (indented JSON, a final
// newline). It fails tb where a temp-dir path, the layout's root or any
// other, leaks into it: an output must not depend on where the node was
// discovered.
func GoldenJSON(tb testing.TB, root string, v any) []byte {
	tb.Helper()
	got, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		tb.Fatal(err)
	}
	got = append(got, '\n')
	for _, leak := range []string{root, os.TempDir() + "/", "/tmp/"} {
		if bytes.Contains(got, []byte(leak)) {
			tb.Errorf("output contains temp path %q:\n%s", leak, got)
		}
	}
	return got
}

package inject

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/device/devicesim"
	"github.com/hyperaccel/lpu-node/pkg/device/devicetest"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// goldenIDs is a 4-LPU wrap-around arc on a ring of 8: ring order, arc start
// first.
var goldenIDs = []string{"lpu6", "lpu7", "lpu0", "lpu1"}

// goldenOrionIDs is a 2-LPU wrap-around arc on the simulated Orion ring of
// four (lpu0 lpu1 lpu3 lpu2): two LPUs of two nodes each.
var goldenOrionIDs = []string{"lpu2", "lpu0"}

// goldenLayouts are the node layouts the golden tests render: our own one
// node per LPU, and Orion's two (render and management node). lpu-nri's
// nriedit renders the same sets to NRI and checks its CDI rendering
// against these golden specs, so keep the two setups alike.
var goldenLayouts = map[string]struct {
	setup  func(t *testing.T) (string, *device.Inventory, []device.Device, Options)
	suffix string
}{
	"lpu":    {goldenSetup, ""},
	"xilinx": {goldenSetupOrion, "-xilinx"},
}

// goldenSetupOrion discovers a simulated Orion node of four cards under a
// temp dir with the xilinx backend and picks goldenOrionIDs.
func goldenSetupOrion(t *testing.T) (root string, inv *device.Inventory, devs []device.Device, opts Options) {
	t.Helper()
	root = t.TempDir()
	if err := devicesim.Write(root, devicesim.Spec{Devices: 4, Rings: 1, Backend: device.BackendXilinx}); err != nil {
		t.Fatal(err)
	}
	inv, err := device.NewSysfs(root, device.WithDiscovery(device.Discovery{Backend: device.BackendXilinx}),
		device.WithNetworkTable(device.DefaultNetworkTable)).Discover(context.Background())
	if err != nil {
		t.Fatalf("discover: %v", err)
	}
	for _, id := range goldenOrionIDs {
		d, ok := inv.Device(id)
		if !ok || len(d.Nodes) != 2 {
			t.Fatalf("%s: %+v, want a discovered LPU with two nodes", id, d)
		}
		devs = append(devs, d)
	}
	return root, inv, devs, Options{Mounts: []Mount{{HostPath: "/opt/xilinx/xrt"}}}
}

// goldenSetup discovers a fake 8-LPU node (one ring) under a temp dir, so
// any discovery-root path leaking into the output would show up.
func goldenSetup(t *testing.T) (root string, inv *device.Inventory, devs []device.Device, opts Options) {
	t.Helper()
	var rows []devicetest.Row
	for i := range 8 {
		rows = append(rows, devicetest.Row{Index: i})
	}
	root = devicetest.NewTree(t, rows...)
	ring := []string{"lpu0", "lpu1", "lpu2", "lpu3", "lpu4", "lpu5", "lpu6", "lpu7"}
	inv, err := device.NewSysfs(root, device.WithRings([][]string{ring})).Discover(context.Background())
	if err != nil {
		t.Fatalf("discover: %v", err)
	}
	for _, id := range goldenIDs {
		d, ok := inv.Device(id)
		if !ok {
			t.Fatalf("%s not discovered", id)
		}
		devs = append(devs, d)
	}
	opts = Options{
		Mounts: []Mount{{HostPath: "/usr/lib/lpu"}, {HostPath: "/opt/lpu/bin", ContainerPath: "/usr/local/lpu/bin"}},
		Env:    map[string]string{"LPU_LOG_LEVEL": "info"},
	}
	return root, inv, devs, opts
}

func TestGolden(t *testing.T) {
	for layout, l := range goldenLayouts {
		t.Run(layout, func(t *testing.T) { testGolden(t, l.setup, l.suffix) })
	}
}

func testGolden(t *testing.T, setup func(t *testing.T) (string, *device.Inventory, []device.Device, Options), suffix string) {
	root, inv, _, opts := setup(t)
	spec, err := Spec(inv, opts)
	if err != nil {
		t.Fatal(err)
	}
	outputs := map[string]any{
		"cdi-spec" + suffix + ".golden.json": spec,
	}
	for name, v := range outputs {
		t.Run(name, func(t *testing.T) {
			got, err := json.MarshalIndent(v, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			for _, leak := range []string{root, os.TempDir() + "/", "/tmp/"} {
				if bytes.Contains(got, []byte(leak)) {
					t.Errorf("output contains temp path %q:\n%s", leak, got)
				}
			}
			path := filepath.Join("testdata", name)
			if *update {
				if err := os.MkdirAll("testdata", 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -run TestGolden -update)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s differs from golden (rerun with -update if intended):\n%s", name, got)
			}
		})
	}
}

package device_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/device/devicesim"
)

// A simulated node with two rings, discovered like a real one. Paths are
// host paths, whatever the root.
func Example() {
	dir, err := os.MkdirTemp("", "lpu-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	root := filepath.Join(dir, "simulated-node")
	if err := devicesim.Write(root, devicesim.Spec{Devices: 8, Rings: 2}); err != nil {
		fmt.Println(err)
		return
	}
	inv, err := device.NewSysfs(root).Discover(context.Background())
	if err != nil {
		fmt.Println(err)
		return
	}
	d := inv.Devices[5]
	fmt.Println(d.ID, d.Path, d.Major, d.Minor, d.PCIBusID, d.NUMANode, d.Health.Healthy)
	fmt.Println(inv.Rings, inv.DriverVersion)
	// Output:
	// lpu5 /dev/lpu5 509 5 0000:15:00.0 1 true
	// [[lpu0 lpu1 lpu2 lpu3] [lpu4 lpu5 lpu6 lpu7]] 2.1.0-sim
}

// The network table format: links between neighbours, in any order; the
// resolver maps each token to an LPU index (discovery also accepts PCI
// addresses).
func ExampleParseNetworkTableFunc() {
	byID := func(tok string) (int, error) { return device.ParseID(tok) }
	table := []byte(`# two rings
lpu3 lpu2
lpu0 lpu3   # links are undirected
lpu1 lpu0
lpu2 lpu1
lpu4 lpu5   # a ring of two: one link
`)
	nt, err := device.ParseNetworkTableFunc("/etc/lpu/network.table", table, byID)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(nt.Rings)

	_, err = device.ParseNetworkTableFunc("/etc/lpu/network.table", []byte("lpu0 lpu1\nlpu1 lpu2\n"), byID)
	fmt.Println(err)
	// Output:
	// [[lpu0 lpu1 lpu2 lpu3] [lpu4 lpu5]]
	// network table /etc/lpu/network.table line 1: lpu0 has only one link (to lpu1): links must close a ring
}

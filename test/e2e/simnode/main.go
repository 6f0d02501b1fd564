// Command simnode writes the simulated LPU node tree the end-to-end tests run
// on (devicesim.Write) and prints the rings discovery finds in it, one
// line per ring:
//
//	simnode --root /tmp/lpu-e2e.x/node --devices 8 --rings 1 --major 240
//	ring0: lpu0 lpu1 lpu2 lpu3 lpu4 lpu5 lpu6 lpu7
//
// With --backend xilinx (an Orion node) or pci (a Bertha node) it writes
// that layout and discovers it with that backend and the simulated network
// table; every backend also prints one line per device node:
//
//	simnode --root /tmp/lpu-e2e.x/orion --devices 8 --backend xilinx --major 241
//	ring0: lpu0 lpu1 lpu3 lpu5 lpu7 lpu6 lpu4 lpu2
//	pci lpu0 0000:17:00.1
//	node lpu0 /dev/dri/renderD128 226:128
//	node lpu0 /dev/xclmgmt5888 241:0
//
// The device nodes it writes are plain files; run.sh replaces them with real
// character devices of the numbers printed. It removes the tree's
// device.TreeMarker once it has discovered it: the daemons are to
// treat the tree as a real host (real device nodes only, driver mounts and
// the NFD file where a host has them).
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/device/devicesim"
)

func main() {
	if err := run(); err != nil {
		slog.Error("exiting", "err", err)
		os.Exit(1)
	}
}

func run() error {
	root := flag.String("root", "", "directory to write the node tree into (required)")
	devices := flag.Int("devices", 8, "number of LPUs")
	rings := flag.Int("rings", 1, "number of rings")
	major := flag.Int64("major", 240, "character device major written to sysfs dev attributes (xilinx: of the management nodes)")
	backend := flag.String("backend", device.BackendLPU, "layout to write and discover: lpu, xilinx or pci")
	flag.Parse()
	if *root == "" {
		return fmt.Errorf("--root is required")
	}
	if err := devicesim.Write(*root, devicesim.Spec{Devices: *devices, Rings: *rings, Major: *major, Backend: *backend}); err != nil {
		return fmt.Errorf("simulate node under %s: %w", *root, err)
	}
	opts := []device.Option{device.WithDiscovery(device.Discovery{Backend: *backend})}
	if *backend != device.BackendLPU {
		opts = append(opts, device.WithNetworkTable(device.DefaultNetworkTable))
	}
	inv, err := device.NewSysfs(*root, opts...).Discover(context.Background())
	if err != nil {
		return fmt.Errorf("discover %s: %w", *root, err)
	}
	if err := os.Remove(filepath.Join(*root, device.TreeMarker)); err != nil {
		return fmt.Errorf("unmark %s: %w", *root, err)
	}
	for i, r := range inv.Rings {
		fmt.Printf("ring%d: %s\n", i, strings.Join(r, " "))
	}
	for _, d := range inv.Devices {
		if d.PCIBusID != "" {
			fmt.Printf("pci %s %s\n", d.ID, d.PCIBusID)
		}
		for _, n := range d.NodeList() {
			fmt.Printf("node %s %s %d:%d\n", d.ID, n.Path, n.Major, n.Minor)
		}
	}
	return nil
}

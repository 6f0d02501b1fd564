// Command simnode writes the simulated LPU node tree the end-to-end tests run
// on (pkg/device's Simulate) and prints the rings discovery finds in it, one
// line per ring:
//
//	simnode --root /tmp/lpu-e2e.x/node --devices 8 --rings 1 --major 240
//	ring0: lpu0 lpu1 lpu2 lpu3 lpu4 lpu5 lpu6 lpu7
//
// The device nodes it writes are plain files; run.sh replaces them with real
// character devices on the chosen major.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/hyperaccel/lpu-node/pkg/device"
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
	major := flag.Int64("major", 240, "character device major written to sysfs dev attributes")
	flag.Parse()
	if *root == "" {
		return fmt.Errorf("--root is required")
	}
	if err := device.Simulate(*root, device.SimSpec{Devices: *devices, Rings: *rings, Major: *major}); err != nil {
		return fmt.Errorf("simulate node under %s: %w", *root, err)
	}
	inv, err := device.NewSysfs(*root).Discover(context.Background())
	if err != nil {
		return fmt.Errorf("discover %s: %w", *root, err)
	}
	for i, r := range inv.Rings {
		fmt.Printf("ring%d: %s\n", i, strings.Join(r, " "))
	}
	return nil
}

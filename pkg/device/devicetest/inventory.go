package devicetest

import (
	"fmt"

	"github.com/hyperaccel/lpu-node/pkg/device"
)

// Inventory is an in-memory inventory of rings × per healthy LPUs,
// numbered over all rings, as discovery would return it: LPU i is
// /dev/lpu<i> (major 240, minor i), firmware 2.0.1, model LPU-X1; the LPUs
// of ring r sit on NUMA node r%2 and PCI bus r (bus ID 0000:<r>:<p>.0).
// For the code that works from an inventory (slices, specs) rather than
// from a tree.
func Inventory(rings, per int) *device.Inventory {
	inv := &device.Inventory{DriverVersion: "1.4.2"}
	for r := 0; r < rings; r++ {
		var ring []string
		for p := 0; p < per; p++ {
			i := r*per + p
			inv.Devices = append(inv.Devices, device.Device{
				ID: device.ID(i), Index: i, Path: fmt.Sprintf("/dev/lpu%d", i), Major: 240, Minor: int64(i),
				Firmware: "2.0.1", Model: "LPU-X1", NUMANode: r % 2,
				PCIBusID: fmt.Sprintf("0000:%02x:%02x.0", r, p), Health: device.Health{Healthy: true},
			})
			ring = append(ring, device.ID(i))
		}
		inv.Rings = append(inv.Rings, ring)
	}
	return inv
}

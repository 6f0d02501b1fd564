package device

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Status words the driver writes to /sys/class/lpu/lpuN/status. Anything
// else is an error word and makes the device unhealthy.
const (
	StatusReady = "READY"
	StatusBusy  = "BUSY"
)

// IDPrefix starts every LPU ID: the device with index 3 is "lpu3".
const IDPrefix = "lpu"

// Device is one LPU as discovered on the host. Paths are host paths
// (/dev/lpu3), never paths under the discovery root.
type Device struct {
	ID       string // "lpu3"
	Index    int    // 3
	Path     string // host device node, "/dev/lpu3"
	Major    int64  // from the sysfs dev attribute
	Minor    int64
	Serial   string
	Firmware string
	Model    string // product name from the model attribute, "" when absent
	NUMANode int    // -1 when unknown
	PCIBusID string // basename of the device link, "" when absent
	Health   Health

	// Nodes are every device node a container holding this LPU gets, in
	// order, primary first; Nodes[0] is always Path, Major and Minor. The
	// lpu and pci backends give one node, the xilinx backend two (the
	// render node, then the management node when those are injected).
	// A node whose number is unknown has Major and Minor 0.
	Nodes []Node
	// PCIFunctions are the addresses of every PCI function of the LPU's
	// card, PCIBusID first (the xilinx backend: user, then management).
	// Network tables may name an LPU by any of them. Empty when unknown.
	PCIFunctions []string
}

// Node is one device node of an LPU, a host path with its device number
// as sysfs reports it.
type Node struct {
	Path  string // host path, also the container path: "/dev/dri/renderD128"
	Major int64
	Minor int64
}

// Health says whether a device is usable, and why not.
type Health struct {
	Healthy bool
	Reason  string // empty when healthy; e.g. `status "ECC_ERROR"`, "device node /dev/lpu3 missing"
}

// Telemetry is one reading of a device's telemetry attributes. Fields the
// driver does not expose stay zero and are listed in Missing.
type Telemetry struct {
	UtilizationPercent float64
	MemoryUsedBytes    uint64
	MemoryTotalBytes   uint64
	TemperatureCelsius float64
	PowerWatts         float64
	Missing            []string
}

// Inventory is everything discovery found on a node.
type Inventory struct {
	Devices       []Device   // sorted by Index
	Rings         [][]string // device IDs in ring order; every device is on exactly one ring
	DriverVersion string     // /sys/module/lpu/version (xilinx: /sys/module/xocl/version), "" when absent
	Backend       string     // the discovery backend that found them: BackendLPU, BackendXilinx or BackendPCI
}

// Equal reports whether d and o are the same device with the same
// attributes, nodes and health. Device holds slices, so == does not
// compile; use this.
func (d *Device) Equal(o *Device) bool {
	return d.ID == o.ID && d.Index == o.Index && d.Path == o.Path && d.Major == o.Major && d.Minor == o.Minor &&
		d.Serial == o.Serial && d.Firmware == o.Firmware && d.Model == o.Model && d.NUMANode == o.NUMANode &&
		d.PCIBusID == o.PCIBusID && d.Health == o.Health &&
		slices.Equal(d.Nodes, o.Nodes) && slices.Equal(d.PCIFunctions, o.PCIFunctions)
}

// NodeList returns the device nodes of d, primary first: d.Nodes, or the
// primary node alone for a Device built without Nodes. An unhealthy device
// whose nodes could not be found has none (Path "").
func (d *Device) NodeList() []Node {
	if len(d.Nodes) > 0 {
		return d.Nodes
	}
	if d.Path == "" {
		return nil
	}
	return []Node{{Path: d.Path, Major: d.Major, Minor: d.Minor}}
}

// Device returns the device with the given ID.
func (inv *Inventory) Device(id string) (Device, bool) {
	for i := range inv.Devices { // by index: copy only the match
		if inv.Devices[i].ID == id {
			return inv.Devices[i], true
		}
	}
	return Device{}, false
}

// HealthyIDs returns the IDs of healthy devices, by index.
func (inv *Inventory) HealthyIDs() []string {
	ids := make([]string, 0, len(inv.Devices))
	for _, d := range inv.Devices {
		if d.Health.Healthy {
			ids = append(ids, d.ID)
		}
	}
	return ids
}

// Discoverer finds the LPUs of a node. The production implementation reads
// sysfs under a root directory; tests point it at a fake tree.
type Discoverer interface {
	Discover(ctx context.Context) (*Inventory, error)
}

// ParseID returns the index of an ID of the form "lpuN" (N a decimal without
// sign or leading zeros, below 1<<16).
func ParseID(id string) (int, error) {
	digits, ok := strings.CutPrefix(id, IDPrefix)
	n, err := parseDecimal(digits, 1<<16-1)
	if !ok || err != nil {
		return 0, fmt.Errorf("device id %q: want %sN", id, IDPrefix)
	}
	return int(n), nil
}

// ID returns the device ID for an index.
func ID(index int) string { return IDPrefix + strconv.Itoa(index) }

package arcslice

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/hyperaccel/lpu-node/pkg/alloc"
	"github.com/hyperaccel/lpu-node/pkg/device"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/dynamic-resource-allocation/resourceslice"
)

// Driver is the DRA driver name and the domain of the device attributes.
const Driver = "lpu.hyperaccel.ai"

// API limits of resource.k8s.io/v1 in Kubernetes 1.37 that shape the slices.
const (
	MaxDevicesPerSlice     = 64 // once devices consume counters or carry taints
	MaxCounterSetsPerSlice = 8
	MaxCountersPerSet      = 32
)

// TaintKey marks arcs holding an unhealthy LPU; the value is the LPU ID.
const TaintKey = Driver + "/unhealthy"

// PCIeRootAttribute is the standard attribute naming a device's PCIe root.
const PCIeRootAttribute resourceapi.QualifiedName = "resource.kubernetes.io/pcieRoot"

// Options tunes Build.
type Options struct {
	// Held are the LPU IDs taken by prepared claims; they decide the order
	// (alloc.ArcOrder). Unhealthy LPUs count as held for the order too.
	Held []string
	// PCIeRoot returns the PCIe root ("pci0000:00") of a PCI bus ID, "" when
	// unknown. Nil leaves the attribute out.
	PCIeRoot func(pciBusID string) string
}

// Build returns the slices of one node's pool for inv: device slices in
// priority order, then counter slices. It fails, naming the ring, when a
// ring is longer than MaxCountersPerSet or names an LPU discovery lacks.
func Build(inv *device.Inventory, opts Options) ([]resourceslice.Slice, error) {
	layout, err := alloc.NewLayout(inv.Rings)
	if err != nil {
		return nil, fmt.Errorf("rings: %w", err)
	}
	devs := make(map[string]*device.Device, len(inv.Devices))
	for i := range inv.Devices {
		devs[inv.Devices[i].ID] = &inv.Devices[i]
	}
	one := resource.MustParse("1")
	sets := make([]resourceapi.CounterSet, len(inv.Rings))
	for r, ring := range inv.Rings {
		if len(ring) > MaxCountersPerSet {
			return nil, fmt.Errorf("ring %d (%s…%s) has %d LPUs: a DRA counter set holds at most %d, so its arcs cannot be published",
				r, ring[0], ring[len(ring)-1], len(ring), MaxCountersPerSet)
		}
		counters := make(map[string]resourceapi.Counter, len(ring))
		for _, id := range ring {
			if devs[id] == nil {
				return nil, fmt.Errorf("ring %d: LPU %q is not in the inventory", r, id)
			}
			counters[id] = resourceapi.Counter{Value: one}
		}
		sets[r] = resourceapi.CounterSet{Name: CounterSetName(r), Counters: counters}
	}

	held := append([]string(nil), opts.Held...)
	for _, d := range inv.Devices {
		if !d.Health.Healthy {
			held = append(held, d.ID)
		}
	}
	b := builder{inv: inv, devs: devs, one: one, opts: opts, roots: map[string]string{}}
	order := layout.ArcOrder(held)
	slices := make([]resourceslice.Slice, 0, (len(order)+MaxDevicesPerSlice-1)/MaxDevicesPerSlice+(len(sets)+MaxCounterSetsPerSlice-1)/MaxCounterSetsPerSlice)
	for i := 0; i < len(order); i += MaxDevicesPerSlice {
		part := order[i:min(i+MaxDevicesPerSlice, len(order))]
		out := make([]resourceapi.Device, len(part))
		for j, a := range part {
			out[j] = b.device(a, layout.ArcIDs(a))
		}
		slices = append(slices, resourceslice.Slice{Devices: out})
	}
	for i := 0; i < len(sets); i += MaxCounterSetsPerSlice {
		slices = append(slices, resourceslice.Slice{SharedCounters: sets[i:min(i+MaxCounterSetsPerSlice, len(sets))]})
	}
	return slices, nil
}

// CounterSetName names the counter set of ring r.
func CounterSetName(r int) string { return "ring" + strconv.Itoa(r) }

// DeviceName names the device of an arc: "ring0-start6-size4".
func DeviceName(a alloc.Arc) string {
	return "ring" + strconv.Itoa(a.Ring) + "-start" + strconv.Itoa(a.Start) + "-size" + strconv.Itoa(a.Size)
}

// ParseDeviceName is the inverse of DeviceName. It checks the form only;
// whether the node has the arc is the caller's question.
func ParseDeviceName(name string) (alloc.Arc, error) {
	bad := fmt.Errorf("device name %q: want ring<R>-start<S>-size<K>", name)
	rest, ok := strings.CutPrefix(name, "ring")
	if !ok {
		return alloc.Arc{}, bad
	}
	parts := strings.Split(rest, "-")
	if len(parts) != 3 {
		return alloc.Arc{}, bad
	}
	ring, ok1 := number(parts[0], "")
	start, ok2 := number(parts[1], "start")
	size, ok3 := number(parts[2], "size")
	if !ok1 || !ok2 || !ok3 || size == 0 {
		return alloc.Arc{}, bad
	}
	return alloc.Arc{Ring: ring, Start: start, Size: size}, nil
}

// number parses prefix+N with N a decimal without sign or leading zeros,
// below 1<<16.
func number(s, prefix string) (int, bool) {
	digits, ok := strings.CutPrefix(s, prefix)
	if !ok || digits == "" || len(digits) > 5 || (len(digits) > 1 && digits[0] == '0') {
		return 0, false
	}
	n := 0
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, n < 1<<16
}

type builder struct {
	inv   *device.Inventory
	devs  map[string]*device.Device
	one   resource.Quantity
	opts  Options
	roots map[string]string // PCI bus ID → PCIe root, memoised per Build
}

func intAttr(v int) resourceapi.DeviceAttribute {
	x := int64(v)
	return resourceapi.DeviceAttribute{IntValue: &x}
}

func strAttr(v string) resourceapi.DeviceAttribute {
	return resourceapi.DeviceAttribute{StringValue: &v}
}

// device renders one arc.
func (b *builder) device(a alloc.Arc, ids []string) resourceapi.Device {
	attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		"size":  intAttr(a.Size),
		"ring":  intAttr(a.Ring),
		"start": intAttr(a.Start),
		"lpus":  strAttr(strings.Join(ids, ",")),
	}
	if b.inv.DriverVersion != "" {
		attrs["driverVersion"] = strAttr(b.inv.DriverVersion)
	}
	first := b.devs[ids[0]]
	model, firmware, numa := first.Model, first.Firmware, first.NUMANode
	root := b.root(first.PCIBusID)
	counters := make(map[string]resourceapi.Counter, len(ids))
	var sick string
	for _, id := range ids {
		d := b.devs[id]
		counters[id] = resourceapi.Counter{Value: b.one}
		if d.Model != model {
			model = ""
		}
		if d.Firmware != firmware {
			firmware = ""
		}
		if d.NUMANode != numa {
			numa = -1
		}
		if root != "" && b.root(d.PCIBusID) != root {
			root = ""
		}
		if !d.Health.Healthy && sick == "" {
			sick = id
		}
	}
	if model != "" {
		attrs["model"] = strAttr(model)
	}
	if firmware != "" {
		attrs["firmware"] = strAttr(firmware)
	}
	if numa >= 0 {
		attrs["numaNode"] = intAttr(numa)
	}
	if root != "" {
		attrs[PCIeRootAttribute] = strAttr(root)
	}
	dev := resourceapi.Device{
		Name:             DeviceName(a),
		Attributes:       attrs,
		ConsumesCounters: []resourceapi.DeviceCounterConsumption{{CounterSet: CounterSetName(a.Ring), Counters: counters}},
	}
	if sick != "" {
		dev.Taints = []resourceapi.DeviceTaint{{Key: TaintKey, Value: sick, Effect: resourceapi.DeviceTaintEffectNoSchedule}}
	}
	return dev
}

// root is the PCIe root of a bus ID, "" when unknown.
func (b *builder) root(busID string) string {
	if busID == "" || b.opts.PCIeRoot == nil {
		return ""
	}
	r, ok := b.roots[busID]
	if !ok {
		r = b.opts.PCIeRoot(busID)
		b.roots[busID] = r
	}
	return r
}

package arcslice

import (
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/hyperaccel/lpu-node/pkg/alloc"
	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/inject"
)

// API limits of resource.k8s.io/v1 in Kubernetes 1.37 that shape the slices.
const (
	MaxDevicesPerSlice     = 64 // once devices consume counters or carry taints
	MaxCounterSetsPerSlice = 8
	MaxCountersPerSet      = 32
	MaxStringAttribute     = 64 // bytes of a string attribute value
)

// TaintKey marks arcs holding an unhealthy LPU; the value is the LPU ID.
const TaintKey = inject.Driver + "/unhealthy"

// CordonTaintKey marks arcs holding an LPU an operator cordoned (taken out
// of service, Builder.WithCordoned); the value is the LPU ID.
const CordonTaintKey = inject.Driver + "/cordoned"

// PCIeRootAttribute is the standard attribute naming a device's PCIe root.
const PCIeRootAttribute resourceapi.QualifiedName = "resource.kubernetes.io/pcieRoot"

// NUMANodeAttribute is the standard attribute naming a device's NUMA node,
// published beside our own numaNode so that one claim can match an arc
// with another driver's device (a NIC, CPUs) on the same NUMA node.
const NUMANodeAttribute resourceapi.QualifiedName = "resource.kubernetes.io/numaNode"

// RecentFaultsAttribute counts the faults of an arc's LPUs in the driver's
// recent history (lpu-dra: the last 24 h), 0 when there were none. Every
// arc carries it, so a selector such as
// device.attributes["lpu.hyperaccel.ai"].recentFaults == 0 never meets a
// device without it.
const RecentFaultsAttribute resourceapi.QualifiedName = "recentFaults"

// CountPathAttribute is true on the count devices (one per LPU, named by
// CountDeviceName) and false on every arc, so that the count class's
// selector meets no device without it. The count devices serve a pod's
// plain hyperaccel.ai/lpu: k through a DeviceClass with that extended
// resource name: the allocator takes the first k free ones in published
// order, and they are published longest free run first (see Slices).
const CountPathAttribute resourceapi.QualifiedName = "countPath"

// Options tunes NewBuilder.
type Options struct {
	// PCIeRoot returns the PCIe root ("pci0000:00") of a PCI bus ID, "" when
	// unknown. Nil leaves the attribute out.
	PCIeRoot func(pciBusID string) string
	// Sizes are the arc sizes to publish; nil or empty publishes every
	// arc. The scheduler evaluates every published device of a node it
	// checks, so fewer devices schedule faster.
	Sizes []int
}

// Unhealthy returns the IDs of inv's unhealthy LPUs, nil when every LPU
// is healthy: what Builder.Slices taints.
func Unhealthy(inv *device.Inventory) map[string]bool {
	var sick map[string]bool
	for _, d := range inv.Devices {
		if !d.Health.Healthy {
			if sick == nil {
				sick = map[string]bool{}
			}
			sick[d.ID] = true
		}
	}
	return sick
}

// Builder holds the rendered devices of one inventory, so that a republish
// after a Prepare or a health change only orders and taints them.
type Builder struct {
	layout  *alloc.Layout
	sets    []resourceapi.CounterSet
	devices []resourceapi.Device // untainted, in alloc.Layout.Arcs order
	counts  []resourceapi.Device // the count device of each LPU, by ring then position
	base    []int                // index in devices of each ring's first arc
	ringLen []int
	publish []bool // by arc size: published; nil publishes every size
	// cordoned LPUs count as unhealthy for the order and Free, and taint
	// their arcs with CordonTaintKey (WithCordoned); nil: none.
	cordoned map[string]bool
}

// WithCordoned returns a builder sharing b's rendered devices that treats
// the LPUs of cordoned as out of service: Slices and FreeSlices order them
// like unhealthy LPUs (last, so the allocator's first fit avoids them) and
// give every arc holding one a CordonTaintKey taint with NoSchedule (beside
// a TaintKey taint when the arc also holds an unhealthy LPU), and Free
// counts them as taken, so no new claim gets an arc over them. Empty
// cordoned returns b.
func (b *Builder) WithCordoned(cordoned map[string]bool) *Builder {
	if len(cordoned) == 0 {
		return b
	}
	c := *b
	c.cordoned = cordoned
	return &c
}

// index is the position of a in devices: on a ring of n, size k < n at
// start s is (k-1)·n + s, the whole ring (k-1)·n.
func (b *Builder) index(a alloc.Arc) int {
	return b.base[a.Ring] + (a.Size-1)*b.ringLen[a.Ring] + a.Start
}

// NewBuilder renders every arc of inv once. It fails, naming the ring,
// when a ring is longer than MaxCountersPerSet or names an LPU discovery
// lacks.
func NewBuilder(inv *device.Inventory, opts Options) (*Builder, error) {
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
	arcs := layout.Arcs()
	b := &Builder{layout: layout, sets: sets, devices: make([]resourceapi.Device, len(arcs)),
		base: make([]int, len(inv.Rings)), ringLen: make([]int, len(inv.Rings))}
	for r, ring := range inv.Rings {
		b.ringLen[r] = len(ring)
		if r > 0 {
			n := len(inv.Rings[r-1])
			b.base[r] = b.base[r-1] + n*(n-1) + 1
		}
	}
	if len(opts.Sizes) > 0 {
		b.publish = make([]bool, MaxCountersPerSet+1)
		for _, k := range opts.Sizes {
			if k < 1 || k > MaxCountersPerSet {
				return nil, fmt.Errorf("arc size %d: want 1..%d", k, MaxCountersPerSet)
			}
			b.publish[k] = true
		}
	}
	rb := newBuilder(inv, devs, one, opts, len(arcs))
	rb.render(b.devices, arcs, sets)
	b.counts = b.countDevices()
	return b, nil
}

// countDevices renders the count device of every LPU: its single-LPU
// arc's device under CountDeviceName, with CountPathAttribute true.
func (b *Builder) countDevices() []resourceapi.Device {
	yes := true
	var out []resourceapi.Device
	for r, n := range b.ringLen {
		for s := range n {
			a := alloc.Arc{Ring: r, Start: s, Size: 1}
			d := b.devices[b.index(a)]
			d.Name = CountDeviceName(a)
			d.Attributes = maps.Clone(d.Attributes)
			d.Attributes[CountPathAttribute] = resourceapi.DeviceAttribute{BoolValue: &yes}
			out = append(out, d)
		}
	}
	return out
}

// countIndex is the position in counts of the count device of a's LPU.
func (b *Builder) countIndex(a alloc.Arc) int {
	i := a.Start
	for r := range a.Ring {
		i += b.ringLen[r]
	}
	return i
}

// Layout is the ring layout the builder publishes.
func (b *Builder) Layout() *alloc.Layout { return b.layout }

// Slices returns the pool's slices: devices (the arcs of Options.Sizes)
// in alloc.ArcOrder for held (unhealthy LPUs count as held), the sizes
// interleaved rank by rank, then the count devices of every LPU (CountOrder),
// 64 to a slice, then the counter sets, 8 to a slice. A device holding an
// LPU of unhealthy carries the TaintKey taint. The slices share read-only
// maps with the builder and with each other; PublishResources copies them.
func (b *Builder) Slices(held []string, unhealthy map[string]bool) []resourceslice.Slice {
	order := b.order(held, unhealthy)
	if b.publish != nil {
		order = slices.DeleteFunc(order, func(a alloc.Arc) bool { return !b.publish[a.Size] })
	}
	return b.slicesOf(interleave(order), b.CountOrder(held, unhealthy), unhealthy)
}

// FreeSlices is Slices with only the arcs a new claim could be given plus
// the arcs allocated now: an arc touching a held LPU is left out unless it
// is in allocated. The allocator could never give a new claim such an arc
// (an allocated arc already consumes the held LPU's counter), so the first
// fitting device of every request is the one Slices would give, but the
// scheduler walks fewer devices per node. Allocated arcs stay published
// whatever their size (a device that vanishes from its pool while
// allocated confuses the scheduler and the kubelet); arcs this layout
// lacks are ignored. Unhealthy LPUs that no claim holds keep their arcs,
// tainted, as in Slices.
func (b *Builder) FreeSlices(held []string, allocated []alloc.Arc, unhealthy map[string]bool) []resourceslice.Slice {
	busy := make(map[string]bool, len(held))
	for _, id := range held {
		busy[id] = true
	}
	keep := make(map[alloc.Arc]bool, len(allocated))
	for _, a := range allocated {
		keep[a] = true
	}
	touchesBusy := func(a alloc.Arc) bool {
		for _, id := range b.layout.ArcIDs(a) {
			if busy[id] {
				return true
			}
		}
		return false
	}
	order := slices.DeleteFunc(b.order(held, unhealthy), func(a alloc.Arc) bool {
		if keep[a] {
			return false
		}
		if b.publish != nil && !b.publish[a.Size] {
			return true
		}
		return touchesBusy(a)
	})
	// A count device is allocated under its LPU's single arc (ParseDeviceName).
	counts := slices.DeleteFunc(b.CountOrder(held, unhealthy), func(a alloc.Arc) bool { return !keep[a] && touchesBusy(a) })
	return b.slicesOf(interleave(order), counts, unhealthy)
}

// unavailable is the set of LPUs a new claim cannot get: held, unhealthy
// or cordoned (WithCordoned).
func (b *Builder) unavailable(held []string, unhealthy map[string]bool) map[string]bool {
	busy := make(map[string]bool, len(held)+len(unhealthy)+len(b.cordoned))
	for _, id := range held {
		busy[id] = true
	}
	for id := range unhealthy {
		busy[id] = true
	}
	for id := range b.cordoned {
		busy[id] = true
	}
	return busy
}

// CountOrder is the order of the count devices for held (unhealthy and
// cordoned LPUs count as held): the free runs of every ring, longest first (ties: ring,
// then start), each in ring order from its start, then the held LPUs in
// ring order. The allocator takes the first k free count devices, so a
// pod asking k LPUs gets one run, ring neighbours, whenever a free run
// of k exists in the order it was given; k is not known when the order
// is published, so it is worst-fit. The arcs come as single-LPU arcs.
func (b *Builder) CountOrder(held []string, unhealthy map[string]bool) []alloc.Arc {
	busy := b.unavailable(held, unhealthy)
	type run struct{ ring, start, n int }
	var runs []run
	var rest []alloc.Arc
	for r, ring := range b.layout.Rings() {
		n := len(ring)
		first := -1 // a held position, where runs start after
		for i, id := range ring {
			if busy[id] {
				first = i
				rest = append(rest, alloc.Arc{Ring: r, Start: i, Size: 1})
			}
		}
		if first < 0 {
			runs = append(runs, run{r, 0, n})
			continue
		}
		for i := 1; i <= n; {
			s := (first + i) % n
			if busy[ring[s]] {
				i++
				continue
			}
			k := 0
			for i+k <= n && !busy[ring[(first+i+k)%n]] {
				k++
			}
			runs = append(runs, run{r, s, k})
			i += k
		}
	}
	slices.SortStableFunc(runs, func(x, y run) int {
		if x.n != y.n {
			return y.n - x.n
		}
		if x.ring != y.ring {
			return x.ring - y.ring
		}
		return x.start - y.start
	})
	out := make([]alloc.Arc, 0, len(b.counts))
	for _, u := range runs {
		for j := range u.n {
			out = append(out, alloc.Arc{Ring: u.ring, Start: (u.start + j) % b.ringLen[u.ring], Size: 1})
		}
	}
	return append(out, rest...)
}

// order is alloc.ArcOrder with unhealthy and cordoned LPUs counted as
// held.
func (b *Builder) order(held []string, unhealthy map[string]bool) []alloc.Arc {
	all := held
	if len(unhealthy) > 0 || len(b.cordoned) > 0 {
		all = append(append(append([]string(nil), held...), mapsKeys(unhealthy)...), mapsKeys(b.cordoned)...)
	}
	return b.layout.ArcOrder(all)
}

// slicesOf lays out the arc devices of order, then the count devices of
// counts, 64 to a slice, tainting those with an unhealthy or a cordoned
// LPU, then the counter sets, 8 to a slice.
func (b *Builder) slicesOf(order, counts []alloc.Arc, unhealthy map[string]bool) []resourceslice.Slice {
	arcs := len(order)
	order = append(order[:arcs:arcs], counts...)
	out := make([]resourceslice.Slice, 0, (len(order)+MaxDevicesPerSlice-1)/MaxDevicesPerSlice+(len(b.sets)+MaxCounterSetsPerSlice-1)/MaxCounterSetsPerSlice)
	for i := 0; i < len(order); i += MaxDevicesPerSlice {
		part := order[i:min(i+MaxDevicesPerSlice, len(order))]
		devs := make([]resourceapi.Device, len(part))
		for j, a := range part {
			if i+j < arcs {
				devs[j] = b.devices[b.index(a)]
			} else {
				devs[j] = b.counts[b.countIndex(a)]
			}
			if len(unhealthy) > 0 || len(b.cordoned) > 0 {
				devs[j].Taints = b.taints(a, unhealthy)
			}
		}
		out = append(out, resourceslice.Slice{Devices: devs})
	}
	for i := 0; i < len(b.sets); i += MaxCounterSetsPerSlice {
		out = append(out, resourceslice.Slice{SharedCounters: b.sets[i:min(i+MaxCounterSetsPerSlice, len(b.sets))]})
	}
	return out
}

// taints are arc a's taints: TaintKey naming its first unhealthy LPU,
// CordonTaintKey naming its first cordoned one; nil when it has neither.
func (b *Builder) taints(a alloc.Arc, unhealthy map[string]bool) []resourceapi.DeviceTaint {
	var out []resourceapi.DeviceTaint
	for _, m := range []struct {
		ids map[string]bool
		key string
	}{{unhealthy, TaintKey}, {b.cordoned, CordonTaintKey}} {
		for _, id := range b.layout.ArcIDs(a) {
			if m.ids[id] {
				out = append(out, resourceapi.DeviceTaint{Key: m.key, Value: id, Effect: resourceapi.DeviceTaintEffectNoSchedule})
				break
			}
		}
	}
	return out
}

// WithFaults sets RecentFaultsAttribute on every arc device of sl that
// holds an LPU of faults to the sum of its LPUs' counts, and returns sl.
// The devices' attribute maps are shared with the builder, so a device
// that changes gets a map of its own; sl's Devices arrays are sl's own
// (Slices and FreeSlices make them).
func (b *Builder) WithFaults(sl []resourceslice.Slice, faults map[string]int) []resourceslice.Slice {
	if len(faults) == 0 {
		return sl
	}
	for i := range sl {
		for j := range sl[i].Devices {
			d := &sl[i].Devices[j]
			a, err := ParseDeviceName(d.Name)
			if err != nil {
				continue
			}
			n := 0
			for _, id := range b.layout.ArcIDs(a) {
				n += faults[id]
			}
			if n == 0 {
				continue
			}
			d.Attributes = maps.Clone(d.Attributes)
			x := int64(n)
			d.Attributes[RecentFaultsAttribute] = resourceapi.DeviceAttribute{IntValue: &x}
		}
	}
	return sl
}

// interleave reorders arcs that come by size (alloc.Layout.ArcOrder) rank
// by rank: the first arc of every size, then the second of every size, and
// so on. Within a size the order is kept, so the allocator's first fitting
// device of any size, its choice, is the same. But the scheduler evaluates
// the request's CEL selector on device after device until one fits, so a
// k-LPU request now stops within a few devices instead of after every
// smaller arc (BenchmarkSchedulerAllocate in test/dravalidate).
func interleave(order []alloc.Arc) []alloc.Arc {
	var runs [][]alloc.Arc // one per size
	for i := 0; i < len(order); {
		j := i + 1
		for j < len(order) && order[j].Size == order[i].Size {
			j++
		}
		runs = append(runs, order[i:j])
		i = j
	}
	out := make([]alloc.Arc, 0, len(order))
	for rank := 0; len(out) < len(order); rank++ {
		for _, r := range runs {
			if rank < len(r) {
				out = append(out, r[rank])
			}
		}
	}
	return out
}

func mapsKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// CounterSetName names the counter set of ring r.
func CounterSetName(r int) string { return "ring" + strconv.Itoa(r) }

// DeviceName names the device of an arc: "ring0-start6-size4".
func DeviceName(a alloc.Arc) string {
	return "ring" + strconv.Itoa(a.Ring) + "-start" + strconv.Itoa(a.Start) + "-size" + strconv.Itoa(a.Size)
}

// CountDeviceName names the count device of the LPU that a, a single-LPU
// arc, holds: "ring0-start6-count".
func CountDeviceName(a alloc.Arc) string {
	return "ring" + strconv.Itoa(a.Ring) + "-start" + strconv.Itoa(a.Start) + "-count"
}

// IsCountDevice reports whether name has the form of a CountDeviceName.
func IsCountDevice(name string) bool {
	a, err := ParseDeviceName(name)
	return err == nil && name == CountDeviceName(a)
}

// ParseDeviceName is the inverse of DeviceName, and maps a CountDeviceName
// to its LPU's single-LPU arc: both hold the same LPU. It checks the form
// only; whether the node has the arc is the caller's question.
func ParseDeviceName(name string) (alloc.Arc, error) {
	bad := fmt.Errorf("device name %q: want ring<R>-start<S>-size<K> or ring<R>-start<S>-count", name)
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
	if parts[2] == "count" {
		size, ok3 = 1, true
	}
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

// builder renders the devices of one NewBuilder call. Everything a device
// does not own alone is shared: attribute values, the attribute maps' common
// part (cloned, a bulk copy), and one backing array each for the names, the
// lpus strings and values and the counter consumptions, so that a device
// costs its two maps and little else. A 32×8 node has 1824 devices.
type builder struct {
	inv  *device.Inventory
	devs map[string]*device.Device
	one  resource.Quantity
	opts Options
	// roots maps the PCI bus ID of every LPU to its PCIe root, filled by
	// newBuilder, read-only after.
	roots map[string]string
	// Attribute values are read-only once built, so devices share them.
	ints      []resourceapi.DeviceAttribute // indexed by the value
	strs      map[string]resourceapi.DeviceAttribute
	templates map[shared]map[resourceapi.QualifiedName]resourceapi.DeviceAttribute
	lpus      []string // the lpus value of each device, in render order
	consumes  []resourceapi.DeviceCounterConsumption
}

func newBuilder(inv *device.Inventory, devs map[string]*device.Device, one resource.Quantity, opts Options, arcs int) *builder {
	b := &builder{inv: inv, devs: devs, one: one, opts: opts, roots: map[string]string{},
		lpus: make([]string, arcs), consumes: make([]resourceapi.DeviceCounterConsumption, arcs)}
	if opts.PCIeRoot != nil {
		// Every LPU of a ring is in inv.Devices (NewBuilder checked), so
		// after this loop roots is only read, by any goroutine.
		for _, d := range inv.Devices {
			if _, ok := b.roots[d.PCIBusID]; !ok && d.PCIBusID != "" {
				b.roots[d.PCIBusID] = opts.PCIeRoot(d.PCIBusID)
			}
		}
	}
	return b.fork()
}

// fork returns a builder sharing b's read-only state and output arrays,
// with value caches of its own.
func (b *builder) fork() *builder {
	f := *b
	f.ints = nil
	f.strs = map[string]resourceapi.DeviceAttribute{}
	f.templates = map[shared]map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{}
	return &f
}

func (b *builder) intAttr(v int) resourceapi.DeviceAttribute {
	if v < 0 {
		x := int64(v)
		return resourceapi.DeviceAttribute{IntValue: &x}
	}
	for len(b.ints) <= v {
		x := int64(len(b.ints))
		b.ints = append(b.ints, resourceapi.DeviceAttribute{IntValue: &x})
	}
	return b.ints[v]
}

func (b *builder) strAttr(v string) resourceapi.DeviceAttribute {
	a, ok := b.strs[v]
	if !ok {
		a = resourceapi.DeviceAttribute{StringValue: &v}
		b.strs[v] = a
	}
	return a
}

// ringView is one ring laid out twice over, so that the LPUs of an arc
// starting at s are ids[s:s+size] even when it wraps, and its lpus value
// is a substring of joined.
type ringView struct {
	ids    []string
	devs   []*device.Device
	roots  []string
	joined string // ids comma-joined
	at     []int  // offset of ids[i] in joined
}

func (b *builder) view(ring []string) ringView {
	n := len(ring)
	v := ringView{ids: make([]string, 2*n), devs: make([]*device.Device, 2*n), roots: make([]string, 2*n), at: make([]int, 2*n)}
	size := 0
	for i := range v.ids {
		id := ring[i%n]
		v.ids[i], v.devs[i] = id, b.devs[id]
		v.roots[i] = b.root(v.devs[i].PCIBusID)
		size += len(id) + 1
	}
	var sb strings.Builder
	sb.Grow(size)
	for i, id := range v.ids {
		if i > 0 {
			sb.WriteByte(',')
		}
		v.at[i] = sb.Len()
		sb.WriteString(id)
	}
	v.joined = sb.String()
	return v
}

// parallelFrom is the device count from which render splits the rings
// over GOMAXPROCS goroutines: a 32×8 node's 1824 devices take milliseconds
// one at a time, a ring of 8's 57 devices microseconds.
const parallelFrom = 512

// render fills out[i] with the device of arcs[i]; arcs come by ring. Large
// nodes are rendered by several goroutines, each on whole rings with its
// own value caches; they share only read-only state and disjoint indices.
func (b *builder) render(out []resourceapi.Device, arcs []alloc.Arc, sets []resourceapi.CounterSet) {
	names := b.names(arcs)
	workers := min(runtime.GOMAXPROCS(0), len(b.inv.Rings))
	if len(arcs) < parallelFrom || workers < 2 {
		b.renderRange(out, arcs, names, sets, 0, len(arcs))
		return
	}
	var wg sync.WaitGroup
	from := 0
	for w := range workers {
		to := len(arcs)
		if w < workers-1 {
			// Cut at the first ring boundary past an even share.
			to = min(len(arcs), (w+1)*len(arcs)/workers)
			for to < len(arcs) && to > from && arcs[to].Ring == arcs[to-1].Ring {
				to++
			}
		}
		if to <= from {
			continue
		}
		fb := b.fork()
		lo := from
		wg.Go(func() { fb.renderRange(out, arcs, names, sets, lo, to) })
		from = to
	}
	wg.Wait()
}

// renderRange renders arcs[from:to], which start at a ring's first arc.
func (b *builder) renderRange(out []resourceapi.Device, arcs []alloc.Arc, names []string, sets []resourceapi.CounterSet, from, to int) {
	var v ringView
	ring := -1
	for i := from; i < to; i++ {
		a := arcs[i]
		if a.Ring != ring {
			ring = a.Ring
			v = b.view(b.inv.Rings[ring])
		}
		out[i] = b.device(i, a, &v, names[i], sets[ring].Name)
	}
}

// names returns DeviceName of every arc, all carved from one string.
func (b *builder) names(arcs []alloc.Arc) []string {
	buf := make([]byte, 0, 24*len(arcs)) // "ring31-start7-size7" is 19
	ends := make([]int, len(arcs))
	for i, a := range arcs {
		buf = append(buf, "ring"...)
		buf = strconv.AppendInt(buf, int64(a.Ring), 10)
		buf = append(buf, "-start"...)
		buf = strconv.AppendInt(buf, int64(a.Start), 10)
		buf = append(buf, "-size"...)
		buf = strconv.AppendInt(buf, int64(a.Size), 10)
		ends[i] = len(buf)
	}
	all := string(buf)
	out := make([]string, len(arcs))
	from := 0
	for i, end := range ends {
		out[i], from = all[from:end], end
	}
	return out
}

// device renders arc a, the i-th device, of ring v. The attributes every
// arc of a ring shares come from a template map that is cloned (a bulk
// copy, no rehashing) and then given the arc's own size, start and lpus.
func (b *builder) device(i int, a alloc.Arc, v *ringView, name, set string) resourceapi.Device {
	ids := v.ids[a.Start : a.Start+a.Size]
	devs := v.devs[a.Start : a.Start+a.Size]
	first := devs[0]
	model, firmware, numa := first.Model, first.Firmware, first.NUMANode
	root := v.roots[a.Start]
	counters := make(map[string]resourceapi.Counter, len(ids))
	for j, id := range ids {
		d := devs[j]
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
		if root != "" && v.roots[a.Start+j] != root {
			root = ""
		}
	}
	last := a.Start + a.Size - 1
	b.lpus[i] = v.joined[v.at[a.Start] : v.at[last]+len(v.ids[last])]
	attrs := maps.Clone(b.template(shared{ring: a.Ring, model: model, firmware: firmware, numa: numa, root: root}))
	attrs["size"] = b.intAttr(a.Size)
	attrs["start"] = b.intAttr(a.Start)
	if len(b.lpus[i]) <= MaxStringAttribute {
		attrs["lpus"] = resourceapi.DeviceAttribute{StringValue: &b.lpus[i]}
	} else {
		delete(attrs, "lpus") // the API rejects it; ring, start and size still say which LPUs
	}
	b.consumes[i] = resourceapi.DeviceCounterConsumption{CounterSet: set, Counters: counters}
	return resourceapi.Device{
		Name:             name,
		Attributes:       attrs,
		ConsumesCounters: b.consumes[i : i+1 : i+1],
	}
}

// countPathFalse is every arc's CountPathAttribute value (read-only).
var countPathFalse = false

// shared are the attribute values an arc has in common with others.
type shared struct {
	ring            int
	model, firmware string
	numa            int
	root            string
}

// template returns the attribute map of s, with placeholders for size,
// start and lpus so that a clone never grows.
func (b *builder) template(s shared) map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
	if t, ok := b.templates[s]; ok {
		return t
	}
	t := make(map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, 12)
	t["size"], t["start"], t["lpus"] = resourceapi.DeviceAttribute{}, resourceapi.DeviceAttribute{}, resourceapi.DeviceAttribute{}
	t["ring"] = b.intAttr(s.ring)
	t[RecentFaultsAttribute] = b.intAttr(0)
	t[CountPathAttribute] = resourceapi.DeviceAttribute{BoolValue: &countPathFalse}
	if b.inv.DriverVersion != "" {
		t["driverVersion"] = b.strAttr(b.inv.DriverVersion)
	}
	if s.model != "" {
		t["model"] = b.strAttr(s.model)
	}
	if s.firmware != "" {
		t["firmware"] = b.strAttr(s.firmware)
	}
	if s.numa >= 0 {
		t["numaNode"] = b.intAttr(s.numa)
		t[NUMANodeAttribute] = t["numaNode"]
	}
	if s.root != "" {
		t[PCIeRootAttribute] = b.strAttr(s.root)
	}
	b.templates[s] = t
	return t
}

// root is the PCIe root of a bus ID, "" when unknown.
func (b *builder) root(busID string) string { return b.roots[busID] }

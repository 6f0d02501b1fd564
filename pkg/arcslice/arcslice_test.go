package arcslice

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/hyperaccel/lpu-node/config"
	"github.com/hyperaccel/lpu-node/pkg/alloc"
	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/device/devicetest"
	"github.com/hyperaccel/lpu-node/pkg/inject"
)

// inventory is devicetest.Inventory: rings × per healthy LPUs; ring r is
// on PCI bus r (PCIe root pci0000:<r> through rootOf).
var inventory = devicetest.Inventory

// build is what lpu-dra publishes for inv with held taken: NewBuilder,
// then Slices with inv's unhealthy LPUs.
func build(inv *device.Inventory, opts Options, held []string) ([]resourceslice.Slice, error) {
	b, err := NewBuilder(inv, opts)
	if err != nil {
		return nil, err
	}
	return b.Slices(held, Unhealthy(inv)), nil
}

// rootOf maps a bus ID "0000:BB:DD.F" to pci0000:BB.
func rootOf(busID string) string { return "pci0000:" + busID[5:7] }

// apiSlices turns built slices into the ResourceSlice objects the
// resourceslice controller would store, named by index so that name order
// is list order.
func apiSlices(node string, built []resourceslice.Slice) []*resourceapi.ResourceSlice {
	out := make([]*resourceapi.ResourceSlice, len(built))
	for i, s := range built {
		name := node
		out[i] = &resourceapi.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%02x-%s-%s", i, inject.Driver, node)},
			Spec: resourceapi.ResourceSliceSpec{
				Driver:         inject.Driver,
				Pool:           resourceapi.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: int64(len(built))},
				NodeName:       &name,
				Devices:        s.Devices,
				SharedCounters: s.SharedCounters,
			},
		}
	}
	return out
}

// checkInterleaved fails unless got holds the arcs of order (which comes
// by size, alloc.Layout.ArcOrder) with each size's arcs in order's order,
// interleaved rank by rank: the i-th arc of any size comes after the
// (i-1)-th arc of every size.
func checkInterleaved(t *testing.T, got, order []alloc.Arc) {
	t.Helper()
	if len(got) != len(order) {
		t.Fatalf("%d devices, want %d", len(got), len(order))
	}
	bySize := func(arcs []alloc.Arc) map[int][]alloc.Arc {
		m := map[int][]alloc.Arc{}
		for _, a := range arcs {
			m[a.Size] = append(m[a.Size], a)
		}
		return m
	}
	if g, w := bySize(got), bySize(order); !reflect.DeepEqual(g, w) {
		t.Fatal("within a size, devices are not in alloc.ArcOrder order")
	}
	seen := map[int]int{}
	last := 0
	for i, a := range got {
		rank := seen[a.Size]
		seen[a.Size]++
		if rank < last {
			t.Fatalf("device %d (%s) is rank %d of its size after a rank-%d arc", i, DeviceName(a), rank, last)
		}
		last = rank
	}
}

func TestBuildLayouts(t *testing.T) {
	tests := map[string]struct {
		rings, per           int
		deviceSlices, counts int
	}{
		// (every arc + one count device per LPU) / 64, rounded up
		"1x8":  {rings: 1, per: 8, deviceSlices: 2, counts: 1},
		"2x8":  {rings: 2, per: 8, deviceSlices: 3, counts: 1},
		"1x16": {rings: 1, per: 16, deviceSlices: 5, counts: 1},
		"32x8": {rings: 32, per: 8, deviceSlices: 33, counts: 4},
		"1x32": {rings: 1, per: 32, deviceSlices: 17, counts: 1},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			inv := inventory(tc.rings, tc.per)
			built, err := build(inv, Options{PCIeRoot: rootOf}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(built) != tc.deviceSlices+tc.counts {
				t.Fatalf("%d slices, want %d device + %d counter slices", len(built), tc.deviceSlices, tc.counts)
			}
			layout, err := alloc.NewLayout(inv.Rings)
			if err != nil {
				t.Fatal(err)
			}
			want := layout.ArcOrder(nil)
			var got []alloc.Arc
			sets := map[string]resourceapi.CounterSet{}
			for i, s := range built {
				if (len(s.Devices) > 0) == (len(s.SharedCounters) > 0) {
					t.Fatalf("slice %d: want exactly one of devices (%d) and counters (%d)", i, len(s.Devices), len(s.SharedCounters))
				}
				if i < tc.deviceSlices && len(s.Devices) == 0 || i >= tc.deviceSlices && len(s.SharedCounters) == 0 {
					t.Fatalf("slice %d: device slices must come first", i)
				}
				if len(s.Devices) > MaxDevicesPerSlice || len(s.SharedCounters) > MaxCounterSetsPerSlice {
					t.Fatalf("slice %d over the limits: %d devices, %d counter sets", i, len(s.Devices), len(s.SharedCounters))
				}
				for _, cs := range s.SharedCounters {
					if len(cs.Counters) > MaxCountersPerSet {
						t.Fatalf("counter set %s has %d counters", cs.Name, len(cs.Counters))
					}
					sets[cs.Name] = cs
				}
				for _, d := range s.Devices {
					a, err := ParseDeviceName(d.Name)
					if err != nil {
						t.Fatal(err)
					}
					if !isCount(d) {
						got = append(got, a)
					}
				}
			}
			checkInterleaved(t, got, want)
			// Every device consumes exactly its LPUs' counters, from a set of
			// the pool, and says which LPUs those are.
			for _, s := range built[:tc.deviceSlices] {
				for _, d := range s.Devices {
					a, _ := ParseDeviceName(d.Name)
					ids := layout.ArcIDs(a)
					if len(d.ConsumesCounters) != 1 {
						t.Fatalf("%s: %d counter consumptions", d.Name, len(d.ConsumesCounters))
					}
					c := d.ConsumesCounters[0]
					if _, ok := sets[c.CounterSet]; !ok || c.CounterSet != CounterSetName(a.Ring) {
						t.Fatalf("%s consumes from %q", d.Name, c.CounterSet)
					}
					if len(c.Counters) != len(ids) {
						t.Fatalf("%s consumes %d counters, has %d LPUs", d.Name, len(c.Counters), len(ids))
					}
					for _, id := range ids {
						if v, ok := c.Counters[id]; !ok || v.Value.Value() != 1 {
							t.Fatalf("%s: counter %s = %v", d.Name, id, v)
						}
					}
					joined := strings.Join(ids, ",")
					if got, ok := d.Attributes["lpus"]; len(joined) > MaxStringAttribute {
						if ok {
							t.Fatalf("%s: lpus of %d bytes published, over the API limit", d.Name, len(joined))
						}
					} else if !ok || *got.StringValue != joined {
						t.Fatalf("%s: lpus = %v, want %q", d.Name, got, joined)
					}
					if *d.Attributes["size"].IntValue != int64(a.Size) || *d.Attributes["start"].IntValue != int64(a.Start) || *d.Attributes["ring"].IntValue != int64(a.Ring) {
						t.Fatalf("%s: size/start/ring attributes wrong: %v", d.Name, d.Attributes)
					}
					if *d.Attributes[PCIeRootAttribute].StringValue != fmt.Sprintf("pci0000:%02x", a.Ring) {
						t.Fatalf("%s: pcieRoot %v", d.Name, *d.Attributes[PCIeRootAttribute].StringValue)
					}
					if std := d.Attributes[NUMANodeAttribute].IntValue; std == nil || *std != int64(a.Ring%2) {
						t.Fatalf("%s: %s = %v, want %d", d.Name, NUMANodeAttribute, d.Attributes[NUMANodeAttribute], a.Ring%2)
					}
					if *d.Attributes["numaNode"].IntValue != int64(a.Ring%2) || *d.Attributes["model"].StringValue != "LPU-X1" ||
						*d.Attributes["firmware"].StringValue != "2.0.1" || *d.Attributes["driverVersion"].StringValue != "1.4.2" {
						t.Fatalf("%s: attributes %v", d.Name, d.Attributes)
					}
					if len(d.Attributes) > 32 || len(d.Taints) != 0 {
						t.Fatalf("%s: %d attributes, %d taints", d.Name, len(d.Attributes), len(d.Taints))
					}
				}
			}
		})
	}
}

func TestBuildMixedAttributes(t *testing.T) {
	inv := inventory(1, 4)
	inv.Devices[1].Firmware = "2.0.2"
	inv.Devices[2].NUMANode = -1
	inv.Devices[3].PCIBusID = ""
	inv.DriverVersion = ""
	built, err := build(inv, Options{PCIeRoot: rootOf}, nil)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]resourceapi.Device{}
	for _, d := range built[0].Devices {
		byName[d.Name] = d
	}
	tests := map[string]struct {
		device  string
		present []resourceapi.QualifiedName
		absent  []resourceapi.QualifiedName
	}{
		"single LPU keeps all": {device: "ring0-start0-size1", present: []resourceapi.QualifiedName{"firmware", "numaNode", NUMANodeAttribute, PCIeRootAttribute, "model"}, absent: []resourceapi.QualifiedName{"driverVersion"}},
		"mixed firmware":       {device: "ring0-start0-size2", present: []resourceapi.QualifiedName{"numaNode", NUMANodeAttribute, PCIeRootAttribute}, absent: []resourceapi.QualifiedName{"firmware"}},
		"unknown NUMA":         {device: "ring0-start2-size1", present: []resourceapi.QualifiedName{"firmware"}, absent: []resourceapi.QualifiedName{"numaNode", NUMANodeAttribute}},
		"unknown root":         {device: "ring0-start2-size2", absent: []resourceapi.QualifiedName{PCIeRootAttribute, "numaNode", NUMANodeAttribute}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			d, ok := byName[tc.device]
			if !ok {
				t.Fatalf("no device %s", tc.device)
			}
			for _, k := range tc.present {
				if _, ok := d.Attributes[k]; !ok {
					t.Errorf("attribute %s missing", k)
				}
			}
			for _, k := range tc.absent {
				if _, ok := d.Attributes[k]; ok {
					t.Errorf("attribute %s present", k)
				}
			}
		})
	}
}

func TestBuildErrors(t *testing.T) {
	long := inventory(1, 33)
	unknown := inventory(1, 8)
	unknown.Rings[0][3] = "lpu99"
	dup := inventory(1, 8)
	dup.Rings[0][3] = "lpu2"
	tests := map[string]struct {
		inv   *device.Inventory
		sizes []int
		want  string
	}{
		"ring longer than a counter set": {inv: long, want: "ring 0 (lpu0…lpu32) has 33 LPUs: a DRA counter set holds at most 32"},
		"ring names an unknown LPU":      {inv: unknown, want: `ring 0: LPU "lpu99" is not in the inventory`},
		"LPU twice":                      {inv: dup, want: `rings: device "lpu2" listed twice`},
		"arc size 0":                     {inv: inventory(1, 8), sizes: []int{4, 0}, want: "arc size 0: want 1..32"},
		"arc size 33":                    {inv: inventory(1, 8), sizes: []int{33}, want: "arc size 33: want 1..32"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := build(tc.inv, Options{Sizes: tc.sizes}, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
			if got != nil {
				t.Fatalf("slices returned with the error: %d", len(got))
			}
		})
	}
}

// Options.Sizes keeps only arcs of those sizes, each size in the order
// the full set has it, and every counter set; sizes no ring has (16 on
// rings of 8) publish nothing.
func TestBuildSizes(t *testing.T) {
	inv := inventory(2, 8)
	held := []string{"lpu1", "lpu9", "lpu10"}
	full, err := NewBuilder(inv, Options{})
	if err != nil {
		t.Fatal(err)
	}
	some, err := NewBuilder(inv, Options{Sizes: []int{8, 2, 16}})
	if err != nil {
		t.Fatal(err)
	}
	names := func(built []resourceslice.Slice, keep func(alloc.Arc) bool) (out []string, sets int) {
		for _, s := range built {
			sets += len(s.SharedCounters)
			for _, d := range s.Devices {
				a, err := ParseDeviceName(d.Name)
				if err != nil {
					t.Fatal(err)
				}
				if keep(a) && !isCount(d) {
					out = append(out, d.Name)
				}
			}
		}
		return out, sets
	}
	want, _ := names(full.Slices(held, nil), func(a alloc.Arc) bool { return a.Size == 2 || a.Size == 8 })
	got, sets := names(some.Slices(held, nil), func(alloc.Arc) bool { return true })
	if len(want) != 2*8+2 || !reflect.DeepEqual(got, want) {
		t.Fatalf("published %d arcs %v,\nwant the %d of sizes 2 and 8 in full order %v", len(got), got, len(want), want)
	}
	if sets != 2 {
		t.Fatalf("%d counter sets, want one per ring", sets)
	}
}

// config checks dra.arcSizes against its own copy of the counter-set limit
// (config does not import this package's Kubernetes types).
func TestConfigArcSizeLimit(t *testing.T) {
	if config.MaxArcSize != MaxCountersPerSet {
		t.Fatalf("config.MaxArcSize %d, MaxCountersPerSet %d", config.MaxArcSize, MaxCountersPerSet)
	}
}

func TestBuildNoRings(t *testing.T) {
	built, err := build(&device.Inventory{}, Options{}, nil)
	if err != nil || len(built) != 0 {
		t.Fatalf("build(empty) = %d slices, %v", len(built), err)
	}
}

func TestBuildTaintsUnhealthy(t *testing.T) {
	inv := inventory(1, 8)
	inv.Devices[3].Health = device.Health{Reason: `status "ECC_ERROR"`}
	built, err := build(inv, Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	layout, _ := alloc.NewLayout(inv.Rings)
	for _, d := range built[0].Devices {
		a, _ := ParseDeviceName(d.Name)
		holds := strings.Contains(","+strings.Join(layout.ArcIDs(a), ",")+",", ",lpu3,")
		tainted := len(d.Taints) == 1 && d.Taints[0] == resourceapi.DeviceTaint{Key: TaintKey, Value: "lpu3", Effect: resourceapi.DeviceTaintEffectNoSchedule}
		if holds != tainted {
			t.Fatalf("%s holds lpu3 = %v, tainted = %v (%v)", d.Name, holds, tainted, d.Taints)
		}
	}
}

func TestDeviceName(t *testing.T) {
	for _, a := range []alloc.Arc{{Ring: 0, Start: 0, Size: 1}, {Ring: 31, Start: 7, Size: 8}, {Ring: 2, Start: 15, Size: 16}} {
		got, err := ParseDeviceName(DeviceName(a))
		if err != nil || got != a {
			t.Fatalf("round trip of %+v: %+v, %v", a, got, err)
		}
	}
	for _, bad := range []string{"", "ring", "ring0-start0", "ring0-start0-size0", "ring01-start0-size1", "ring0-start-1-size1",
		"ring0-start0-size1-x", "gpu0-start0-size1", "ring0-begin0-size1", "ring99999-start0-size1", "ring+1-start0-size1"} {
		if _, err := ParseDeviceName(bad); err == nil {
			t.Errorf("ParseDeviceName(%q) accepted", bad)
		}
	}
}

func BenchmarkBuild32x8(b *testing.B) {
	inv := inventory(32, 8)
	held := []string{"lpu0", "lpu1", "lpu9", "lpu100", "lpu200", "lpu201"}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := build(inv, Options{PCIeRoot: rootOf}, held); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRepublish32x8(b *testing.B) {
	bld, err := NewBuilder(inventory(32, 8), Options{PCIeRoot: rootOf})
	if err != nil {
		b.Fatal(err)
	}
	held := []string{"lpu0", "lpu1", "lpu9", "lpu100", "lpu200", "lpu201"}
	sick := map[string]bool{"lpu17": true}
	b.ReportAllocs()
	for b.Loop() {
		bld.Slices(held, sick)
	}
}

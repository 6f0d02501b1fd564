package arcslice

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/hyperaccel/lpu-node/pkg/alloc"
	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/inject"
)

// The tests below run the scheduler's own allocator
// (k8s.io/dynamic-resource-allocation/structured) on the published slices.

const className = "lpu.hyperaccel.ai"

type classes []*resourceapi.DeviceClass

func (c classes) List() ([]*resourceapi.DeviceClass, error) { return c, nil }
func (c classes) Get(name string) (*resourceapi.DeviceClass, error) {
	for _, dc := range c {
		if dc.Name == name {
			return dc, nil
		}
	}
	return nil, fmt.Errorf("device class %q not found", name)
}

var lpuClasses = classes{{
	ObjectMeta: metav1.ObjectMeta{Name: className},
	Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{
		CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "lpu.hyperaccel.ai"`},
	}}},
}}

var features = structured.Features{PartitionableDevices: true, DeviceTaints: true, PrioritizedList: true}

// arcClaim asks for one arc of size LPUs.
func arcClaim(i, size int) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("claim-%d", i), Namespace: "default", UID: types.UID(fmt.Sprintf("uid-%d", i))},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "lpus",
			Exactly: &resourceapi.ExactDeviceRequest{
				DeviceClassName: className,
				AllocationMode:  resourceapi.DeviceAllocationModeExactCount,
				Count:           1,
				Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
					Expression: fmt.Sprintf(`device.attributes["lpu.hyperaccel.ai"].size == %d`, size),
				}}},
			},
		}}}},
	}
}

// bestEffortClaim asks for one 4-arc, else four single LPUs.
func bestEffortClaim(i int) *resourceapi.ResourceClaim {
	sel := func(n int) []resourceapi.DeviceSelector {
		return []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: fmt.Sprintf(`device.attributes["lpu.hyperaccel.ai"].size == %d`, n),
		}}}
	}
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("claim-%d", i), Namespace: "default", UID: types.UID(fmt.Sprintf("uid-%d", i))},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "lpus",
			FirstAvailable: []resourceapi.DeviceSubRequest{
				{Name: "arc", DeviceClassName: className, Selectors: sel(4), AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1},
				{Name: "singles", DeviceClassName: className, Selectors: sel(1), AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 4},
			},
		}}}},
	}
}

// cluster is one node's pool as the scheduler sees it.
type cluster struct {
	t       *testing.T
	inv     *device.Inventory
	layout  *alloc.Layout
	state   structured.AllocatedState
	held    []string
	cache   *cel.Cache
	static  bool // keep the slices built for the empty node
	reduced bool // publish as lpu-dra does: FreeSlices with the allocated arcs
	built   []*resourceapi.ResourceSlice
}

func newCluster(t *testing.T, inv *device.Inventory) *cluster {
	layout, err := alloc.NewLayout(inv.Rings)
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{t: t, inv: inv, layout: layout, cache: cel.NewCache(100, cel.Features{}),
		state: structured.AllocatedState{AllocatedDevices: sets.New[structured.DeviceID]()}}
	c.republish()
	return c
}

func (c *cluster) republish() {
	c.t.Helper()
	built, err := build(c.inv, Options{}, c.held)
	if err != nil {
		c.t.Fatal(err)
	}
	if c.reduced {
		b, err := NewBuilder(c.inv, Options{})
		if err != nil {
			c.t.Fatal(err)
		}
		var allocated []alloc.Arc
		for id := range c.state.AllocatedDevices {
			a, err := ParseDeviceName(id.Device.String())
			if err != nil {
				c.t.Fatal(err)
			}
			allocated = append(allocated, a)
		}
		built = b.FreeSlices(c.held, allocated, Unhealthy(c.inv))
	}
	c.built = apiSlices("node-a", built)
}

// allocate runs the allocator for one claim and records the result; it
// returns the LPU IDs of each allocated device, nil when nothing fits.
func (c *cluster) allocate(claim *resourceapi.ResourceClaim) [][]string {
	c.t.Helper()
	a, err := structured.NewAllocator(context.Background(), features, c.state, lpuClasses, c.built, c.cache)
	if err != nil {
		c.t.Fatal(err)
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}
	res, err := a.Allocate(context.Background(), node, []*resourceapi.ResourceClaim{claim})
	if err != nil {
		c.t.Fatal(err)
	}
	if len(res) == 0 {
		return nil
	}
	var out [][]string
	for _, r := range res[0].Devices.Results {
		arc, err := ParseDeviceName(r.Device)
		if err != nil {
			c.t.Fatal(err)
		}
		ids := c.layout.ArcIDs(arc)
		for _, id := range ids {
			if slices.Contains(c.held, id) {
				c.t.Fatalf("allocator handed out %s (%v) overlapping held %v", r.Device, ids, c.held)
			}
		}
		c.held = append(c.held, ids...)
		c.state.AllocatedDevices.Insert(structured.MakeDeviceID(r.Driver, r.Pool, r.Device))
		out = append(out, ids)
	}
	if !c.static {
		c.republish()
	}
	return out
}

// free releases the devices of one earlier allocation.
func (c *cluster) free(ids []string) {
	c.held = slices.DeleteFunc(c.held, func(id string) bool { return slices.Contains(ids, id) })
	size := len(ids)
	for _, a := range c.layout.Arcs() {
		if a.Size == size && slices.Equal(c.layout.ArcIDs(a), ids) {
			c.state.AllocatedDevices.Delete(structured.MakeDeviceID(inject.Driver, "node-a", DeviceName(a)))
		}
	}
	if !c.static {
		c.republish()
	}
}

func (c *cluster) available() []string {
	var out []string
	for _, ring := range c.inv.Rings {
		for _, id := range ring {
			if !slices.Contains(c.held, id) {
				out = append(out, id)
			}
		}
	}
	return out
}

func TestAllocatorEverySizeOnEmptyRing(t *testing.T) {
	for _, shape := range [][2]int{{1, 8}, {2, 8}, {1, 16}} {
		for size := 1; size <= shape[1]; size++ {
			t.Run(fmt.Sprintf("%dx%d size %d", shape[0], shape[1], size), func(t *testing.T) {
				c := newCluster(t, inventory(shape[0], shape[1]))
				want, _ := c.layout.PreferredArc(c.available(), nil, size)
				got := c.allocate(arcClaim(0, size))
				if len(got) != 1 || !slices.Equal(got[0], want) {
					t.Fatalf("allocated %v, pkg/alloc prefers %v", got, want)
				}
			})
		}
	}
}

func TestAllocatorArcsNeverOverlap(t *testing.T) {
	c := newCluster(t, inventory(1, 8))
	a := c.allocate(arcClaim(1, 4))
	b := c.allocate(arcClaim(2, 4))
	if a == nil || b == nil {
		t.Fatalf("two 4-arcs on an empty ring of 8: %v %v", a, b)
	}
	if got := c.allocate(arcClaim(3, 4)); got != nil {
		t.Fatalf("a third 4-arc was allocated: %v", got)
	}
	if got := c.allocate(arcClaim(4, 1)); got != nil {
		t.Fatalf("a single LPU on a full ring: %v", got)
	}
	c.free(a[0])
	if got := c.allocate(arcClaim(5, 4)); len(got) != 1 || !slices.Equal(got[0], a[0]) {
		t.Fatalf("after freeing %v got %v", a[0], got)
	}
}

func TestAllocatorFollowsPreferred(t *testing.T) {
	for _, free := range []bool{false, true} {
		t.Run(fmt.Sprintf("free=%v", free), func(t *testing.T) { followsPreferred(t, free) })
	}
}

// followsPreferred churns claims on a node published in full or, free,
// as FreeSlices: either way the allocator takes pkg/alloc's arc.
func followsPreferred(t *testing.T, free bool) {
	rng := rand.New(rand.NewPCG(3, 4))
	sizes := []int{1, 1, 1, 2, 2, 4, 3, 8}
	for _, shape := range [][2]int{{1, 8}, {2, 8}} {
		c := newCluster(t, inventory(shape[0], shape[1]))
		c.reduced = free
		c.republish()
		var live [][]string
		for step := 0; step < 150; step++ {
			if len(live) > 0 && rng.IntN(3) == 0 {
				i := rng.IntN(len(live))
				c.free(live[i])
				live = slices.Delete(live, i, i+1)
				continue
			}
			size := sizes[rng.IntN(len(sizes))]
			want, contiguous := c.layout.PreferredArc(c.available(), nil, size)
			got := c.allocate(arcClaim(step, size))
			if !contiguous {
				if got != nil {
					t.Fatalf("step %d: no free %d-arc per pkg/alloc, allocator gave %v", step, size, got)
				}
				continue
			}
			if len(got) != 1 || !slices.Equal(got[0], want) {
				t.Fatalf("step %d size %d: allocator gave %v, pkg/alloc prefers %v (held %v)", step, size, got, want, c.held)
			}
			live = append(live, got[0])
		}
	}
}

func TestAllocatorBestEffortFallsBackToSingles(t *testing.T) {
	c := newCluster(t, inventory(1, 8))
	// Hold lpu1, lpu3 and lpu5 with singles (pinned through a 1-arc each):
	// no 4-arc is left, but five LPUs are.
	for _, id := range []string{"lpu1", "lpu3", "lpu5"} {
		c.held = append(c.held, id)
		i, _ := device.ParseID(id)
		c.state.AllocatedDevices.Insert(structured.MakeDeviceID(inject.Driver, "node-a", DeviceName(alloc.Arc{Ring: 0, Start: i, Size: 1})))
	}
	c.republish()
	got := c.allocate(bestEffortClaim(1))
	if len(got) != 4 {
		t.Fatalf("best effort on a fragmented ring: %v, want four singles", got)
	}
	for _, ids := range got {
		if len(ids) != 1 {
			t.Fatalf("fallback device %v is not a single LPU", ids)
		}
	}
	// On an empty ring it takes the arc.
	c = newCluster(t, inventory(1, 8))
	if got := c.allocate(bestEffortClaim(2)); len(got) != 1 || len(got[0]) != 4 {
		t.Fatalf("best effort on an empty ring: %v, want one 4-arc", got)
	}
}

func TestAllocatorSkipsTaintedArcs(t *testing.T) {
	inv := inventory(1, 8)
	inv.Devices[2].Health = device.Health{Reason: "device node /dev/lpu2 missing"}
	c := newCluster(t, inv)
	for i := 0; i < 8; i++ {
		got := c.allocate(arcClaim(i, 1))
		if got == nil {
			if i != 7 {
				t.Fatalf("only %d singles allocated, want 7", i)
			}
			return
		}
		if strings.Join(got[0], ",") == "lpu2" {
			t.Fatal("allocator handed out the unhealthy lpu2")
		}
	}
	t.Fatal("8 singles allocated on a ring with an unhealthy LPU")
}

func TestAllocator32x8(t *testing.T) {
	c := newCluster(t, inventory(32, 8))
	for i := 0; i < 64; i++ {
		if got := c.allocate(arcClaim(i, 4)); len(got) != 1 {
			t.Fatalf("4-arc %d on 32 rings of 8: %v", i, got)
		}
	}
	if got := c.allocate(arcClaim(64, 1)); got != nil {
		t.Fatalf("node is full, got %v", got)
	}
}

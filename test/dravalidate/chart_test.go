package dravalidate

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apitypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	"k8s.io/kubernetes/pkg/apis/resource"
	"k8s.io/kubernetes/pkg/apis/resource/validation"

	"github.com/hyperaccel/lpu-node/pkg/alloc"
	"github.com/hyperaccel/lpu-node/pkg/arcslice"
	"github.com/hyperaccel/lpu-node/pkg/inject"
	"github.com/hyperaccel/lpu-node/test/dravalidate/dratest"
)

func TestChartObjectsPassAPIValidation(t *testing.T) {
	classes, templates := dratest.ChartObjects(t)
	for _, dc := range classes {
		in := dc.DeepCopy()
		legacyscheme.Scheme.Default(in)
		out := &resource.DeviceClass{}
		if err := legacyscheme.Scheme.Convert(in, out, nil); err != nil {
			t.Fatal(err)
		}
		if errs := validation.ValidateDeviceClass(out); len(errs) > 0 {
			t.Errorf("DeviceClass %s rejected: %v", dc.Name, errs.ToAggregate())
		}
	}
	for _, rct := range templates {
		in := rct.DeepCopy()
		legacyscheme.Scheme.Default(in)
		out := &resource.ResourceClaimTemplate{}
		if err := legacyscheme.Scheme.Convert(in, out, nil); err != nil {
			t.Fatal(err)
		}
		if errs := validation.ValidateResourceClaimTemplate(out); len(errs) > 0 {
			t.Errorf("ResourceClaimTemplate %s rejected: %v", rct.Name, errs.ToAggregate())
		}
	}
}

// The chart's classes and templates, defaulted like the API server does,
// run through the scheduler's allocator on lpu-dra's slices of one ring of 8.
func TestChartObjectsAllocate(t *testing.T) {
	classes, templates := dratest.DefaultedChart(t)
	claimOf := func(spec resourcev1.ResourceClaimSpec, name string) *resourcev1.ResourceClaim {
		c := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: apitypes.UID("uid-" + name)}, Spec: *spec.DeepCopy()}
		legacyscheme.Scheme.Default(c)
		return c
	}
	byName := map[string]*resourcev1.ResourceClaimTemplate{}
	for _, rct := range templates {
		byName[rct.Name] = rct
	}
	// `hyperaccel.ai/lpu-arc-4: 1` becomes one request for one device of
	// the class with that extended resource name, no selectors.
	var arc4 string
	for _, dc := range classes {
		if dc.Spec.ExtendedResourceName != nil && *dc.Spec.ExtendedResourceName == "hyperaccel.ai/lpu-arc-4" {
			arc4 = dc.Name
		}
	}
	if arc4 == "" {
		t.Fatal("no class for hyperaccel.ai/lpu-arc-4")
	}
	extended := resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{
		Name: "container-0-request-0", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: arc4, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1}}}}}

	tests := map[string]struct {
		held  []string // held through prepared single-LPU arcs
		spec  resourcev1.ResourceClaimSpec
		sizes []int // sizes of the allocated devices, nil: unallocatable
	}{
		"strict on an empty ring":            {spec: byName["lpu-arc-4"].Spec.Spec, sizes: []int{4}},
		"strict on a fragmented ring":        {held: []string{"lpu1", "lpu3", "lpu5"}, spec: byName["lpu-arc-4"].Spec.Spec},
		"best effort on an empty ring":       {spec: byName["lpu-4-best-effort"].Spec.Spec, sizes: []int{4}},
		"best effort on a fragmented ring":   {held: []string{"lpu1", "lpu3", "lpu5"}, spec: byName["lpu-4-best-effort"].Spec.Spec, sizes: []int{1, 1, 1, 1}},
		"extended resource lpu-arc-4":        {spec: extended, sizes: []int{4}},
		"extended resource, fragmented ring": {held: []string{"lpu1", "lpu3", "lpu5"}, spec: extended},
	}
	// Every shipped strict template gets its size on an empty ring; a
	// best-effort one falls back to singles where only those are free (an
	// 8-arc's fallback needs more than one ring of 8: it gets the arc).
	for _, rct := range templates {
		var k int
		if _, err := fmt.Sscanf(rct.Name, "lpu-arc-%d", &k); err == nil {
			tests["shipped "+rct.Name] = struct {
				held  []string
				spec  resourcev1.ResourceClaimSpec
				sizes []int
			}{spec: rct.Spec.Spec, sizes: []int{k}}
			continue
		}
		if _, err := fmt.Sscanf(rct.Name, "lpu-%d-best-effort", &k); err != nil {
			t.Fatalf("template %s: not a shipped name", rct.Name)
		}
		tc := struct {
			held  []string
			spec  resourcev1.ResourceClaimSpec
			sizes []int
		}{spec: rct.Spec.Spec, sizes: []int{k}}
		if k <= 4 { // every other LPU held: k singles free, no 2-arc
			tc.held = []string{"lpu1", "lpu3", "lpu5", "lpu7"}
			tc.sizes = slices.Repeat([]int{1}, k)
		}
		tests["shipped "+rct.Name] = tc
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			inv := inventory(1, 8)
			built := dratest.Build(t, inv, arcslice.Options{}, tc.held)
			node := "node-a"
			slices := dratest.PoolSlices(node, built)
			state := structured.AllocatedState{AllocatedDevices: sets.New[structured.DeviceID]()}
			for _, id := range tc.held {
				var idx int
				if _, err := fmt.Sscanf(id, "lpu%d", &idx); err != nil {
					t.Fatal(err)
				}
				state.AllocatedDevices.Insert(structured.MakeDeviceID(inject.Driver, node, arcslice.DeviceName(alloc.Arc{Ring: 0, Start: idx, Size: 1})))
			}
			a, err := structured.NewAllocator(context.Background(),
				structured.Features{PartitionableDevices: true, DeviceTaints: true, PrioritizedList: true},
				state, dratest.Lister(classes), slices, cel.NewCache(10, cel.Features{}))
			if err != nil {
				t.Fatal(err)
			}
			res, err := a.Allocate(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}},
				[]*resourcev1.ResourceClaim{claimOf(tc.spec, strings.ReplaceAll(name, " ", "-"))})
			if err != nil {
				t.Fatal(err)
			}
			var sizes []int
			if len(res) > 0 {
				for _, r := range res[0].Devices.Results {
					arc, err := arcslice.ParseDeviceName(r.Device)
					if err != nil {
						t.Fatal(err)
					}
					sizes = append(sizes, arc.Size)
				}
			}
			if fmt.Sprint(sizes) != fmt.Sprint(tc.sizes) {
				t.Fatalf("allocated sizes %v, want %v", sizes, tc.sizes)
			}
		})
	}
}

// TestStandardNUMANodeSelects: a claim from the chart's lpu-arc-4 template
// with one more CEL selector on the standard resource.kubernetes.io/numaNode
// attribute (how a claim pairs an arc with another driver's device on the
// same NUMA node) gets a 4-arc of the ring on that NUMA node, and none
// when no ring is on it.
func TestStandardNUMANodeSelects(t *testing.T) {
	classes, templates := dratest.DefaultedChart(t)
	node := "node-a"
	slices := dratest.PoolSlices(node, dratest.Build(t, inventory(2, 8), arcslice.Options{}, nil)) // ring r on NUMA node r%2
	for numa, wantRing := range map[int]int{0: 0, 1: 1, 2: -1} {
		c := arc4WithSelector(t, templates, fmt.Sprintf("numa-%d", numa), fmt.Sprintf(`device.attributes["resource.kubernetes.io"].numaNode == %d`, numa))
		res := allocateOn(t, classes, slices, node, c)
		if wantRing < 0 {
			if len(res) != 0 {
				t.Fatalf("numaNode == %d: allocated %v, want nothing (no LPU there)", numa, res[0].Devices.Results)
			}
			continue
		}
		if len(res) != 1 || len(res[0].Devices.Results) != 1 {
			t.Fatalf("numaNode == %d: allocated %v, want one 4-arc", numa, res)
		}
		arc, err := arcslice.ParseDeviceName(res[0].Devices.Results[0].Device)
		if err != nil || arc.Ring != wantRing || arc.Size != 4 {
			t.Fatalf("numaNode == %d: got %v (%v), want a 4-arc of ring %d", numa, arc, err, wantRing)
		}
	}
}

// A claim from the chart's lpu-arc-4 template with the selector
// recentFaults == 0 gets a 4-arc clear of the LPUs with recent faults, on
// the real structured allocator; without the selector it takes the first
// arc, over a flaky LPU; with every 4-arc flaky it gets nothing.
func TestRecentFaultsSelectorAvoidsFlakyLPUs(t *testing.T) {
	classes, templates := dratest.DefaultedChart(t)
	node := "node-a"
	b, err := arcslice.NewBuilder(inventory(1, 8), arcslice.Options{})
	if err != nil {
		t.Fatal(err)
	}
	allocate := func(faults map[string]int, expr string) []string {
		t.Helper()
		slices := dratest.PoolSlices(node, b.WithFaults(b.Slices(nil, nil), faults))
		res := allocateOn(t, classes, slices, node, arc4WithSelector(t, templates, "c", expr))
		if len(res) == 0 {
			return nil
		}
		arc, err := arcslice.ParseDeviceName(res[0].Devices.Results[0].Device)
		if err != nil {
			t.Fatal(err)
		}
		return b.Layout().ArcIDs(arc)
	}
	const avoid = `device.attributes["lpu.hyperaccel.ai"].recentFaults == 0`
	flaky := map[string]int{"lpu1": 3}
	if got := allocate(flaky, ""); !slices.Contains(got, "lpu1") {
		t.Fatalf("without the selector: %v; the test needs the first 4-arc to hold lpu1", got)
	}
	got := allocate(flaky, avoid)
	if len(got) != 4 || slices.Contains(got, "lpu1") {
		t.Fatalf("recentFaults == 0: got %v, want a 4-arc without lpu1", got)
	}
	if got := allocate(map[string]int{"lpu1": 1, "lpu5": 1}, avoid); got != nil {
		t.Fatalf("every 4-arc holds lpu1 or lpu5: got %v, want nothing", got)
	}
}

// arc4WithSelector is a claim from the chart's lpu-arc-4 template with one
// more CEL selector (none when expr is empty), defaulted as the API server
// stores it.
func arc4WithSelector(t *testing.T, templates []*resourcev1.ResourceClaimTemplate, name, expr string) *resourcev1.ResourceClaim {
	t.Helper()
	var spec *resourcev1.ResourceClaimSpec
	for _, rct := range templates {
		if rct.Name == "lpu-arc-4" {
			spec = rct.Spec.Spec.DeepCopy()
		}
	}
	if spec == nil || len(spec.Devices.Requests) != 1 || spec.Devices.Requests[0].Exactly == nil {
		t.Fatal("the chart has no single-request lpu-arc-4 template")
	}
	c := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: apitypes.UID("uid-" + name)}, Spec: *spec}
	if expr != "" {
		req := c.Spec.Devices.Requests[0].Exactly
		req.Selectors = append(req.Selectors, resourcev1.DeviceSelector{CEL: &resourcev1.CELDeviceSelector{Expression: expr}})
	}
	legacyscheme.Scheme.Default(c)
	return c
}

// allocateOn runs the real structured allocator for c on node over
// slices, nothing allocated before.
func allocateOn(t *testing.T, classes []*resourcev1.DeviceClass, slices []*resourcev1.ResourceSlice, node string, c *resourcev1.ResourceClaim) []resourcev1.AllocationResult {
	t.Helper()
	a, err := structured.NewAllocator(context.Background(),
		structured.Features{PartitionableDevices: true, DeviceTaints: true, PrioritizedList: true},
		structured.AllocatedState{AllocatedDevices: sets.New[structured.DeviceID]()}, dratest.Lister(classes), slices, cel.NewCache(10, cel.Features{}))
	if err != nil {
		t.Fatal(err)
	}
	res, err := a.Allocate(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, []*resourcev1.ResourceClaim{c})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

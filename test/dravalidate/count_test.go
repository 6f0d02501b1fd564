package dravalidate

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apitypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/kubernetes/pkg/api/legacyscheme"

	"github.com/hyperaccel/lpu-node/pkg/alloc"
	"github.com/hyperaccel/lpu-node/pkg/arcslice"
	"github.com/hyperaccel/lpu-node/test/dravalidate/dratest"
)

// countClass is the chart's DeviceClass for hyperaccel.ai/lpu.
const countClass = "lpu-count.hyperaccel.ai"

// countClaim is the claim the scheduler makes for a pod asking
// hyperaccel.ai/lpu: k on a node without that resource in its
// allocatable: one request of k devices of the class whose
// extendedResourceName it is.
func countClaim(t *testing.T, classes []*resourcev1.DeviceClass, k int) *resourcev1.ResourceClaim {
	t.Helper()
	i := slices.IndexFunc(classes, func(c *resourcev1.DeviceClass) bool { return c.Name == countClass })
	if i < 0 || classes[i].Spec.ExtendedResourceName == nil || *classes[i].Spec.ExtendedResourceName != "hyperaccel.ai/lpu" {
		t.Fatalf("the chart has no DeviceClass %s with extendedResourceName hyperaccel.ai/lpu", countClass)
	}
	name := fmt.Sprintf("count-%d", k)
	c := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: apitypes.UID("uid-" + name)},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{
			Name: "container-0-request-0",
			Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: countClass,
				AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: int64(k)},
		}}}}}
	legacyscheme.Scheme.Default(c)
	return c
}

// A pod asking hyperaccel.ai/lpu: k on a DRA node gets k count devices
// from the scheduler's own allocator (v1.37.2, default features), over
// what lpu-dra publishes (FreeSlices) for node states from a random churn:
// they are k ring neighbours in one ring whenever such a free run exists,
// else k free LPUs, else nothing, and never an LPU a claim holds or an
// unhealthy one.
func TestCountClassGivesRingNeighbours(t *testing.T) {
	classes, _ := dratest.DefaultedChart(t)
	rng := rand.New(rand.NewPCG(46, 1))
	contiguous, scattered := 0, 0
	for _, shape := range [][2]int{{1, 8}, {2, 8}} {
		inv := inventory(shape[0], shape[1])
		b, err := arcslice.NewBuilder(inv, arcslice.Options{Sizes: []int{1, 2, 4, 8}})
		if err != nil {
			t.Fatal(err)
		}
		layout := b.Layout()
		for step := range 150 {
			s := dratest.RandomState(rng, layout, len(inv.Devices), []int{1, 2, 4, 8})
			sick := map[string]bool{}
			for _, i := range s.Sick {
				sick[inv.Devices[i].ID] = true
			}
			built := dratest.PoolSlices("node-a", b.FreeSlices(s.Held, s.Allocated, sick))
			free := 0
			for _, d := range inv.Devices {
				if !slices.Contains(s.Held, d.ID) && !sick[d.ID] {
					free++
				}
			}
			for k := 1; k <= 8; k++ {
				got := choice(t, dratest.Lister(classes), built, s, countClaim(t, classes, k))
				var ids []string
				var arcs []alloc.Arc
				for _, r := range strings.Fields(got) {
					dev := r[strings.Index(r, "=")+1:]
					if !strings.HasSuffix(dev, "-count") {
						t.Fatalf("%dx%d step %d k=%d: got %s, not a count device", shape[0], shape[1], step, k, dev)
					}
					a, err := arcslice.ParseDeviceName(dev)
					if err != nil {
						t.Fatal(err)
					}
					arcs = append(arcs, a)
					ids = append(ids, layout.ArcIDs(a)...)
				}
				if k > free {
					if got != "" {
						t.Fatalf("%dx%d step %d: k=%d > %d free LPUs, got %s", shape[0], shape[1], step, k, free, got)
					}
					continue
				}
				if len(ids) != k {
					t.Fatalf("%dx%d step %d: k=%d with %d free LPUs: got %q", shape[0], shape[1], step, k, free, got)
				}
				for _, id := range ids {
					if slices.Contains(s.Held, id) || sick[id] {
						t.Fatalf("%dx%d step %d k=%d: got %s, held or unhealthy (held %v, sick %v)", shape[0], shape[1], step, k, id, s.Held, sick)
					}
				}
				if runFree(layout, s.Held, sick, k) {
					if !oneRun(layout, arcs) {
						t.Fatalf("%dx%d step %d k=%d: a free run of %d exists (held %v, sick %v), got %v", shape[0], shape[1], step, k, k, s.Held, sick, ids)
					}
					contiguous++
				} else {
					scattered++
				}
			}
		}
	}
	t.Logf("contiguous whenever a run was free: %d requests; %d more with no free run of k, given k free LPUs", contiguous, scattered)
}

// runFree reports whether some ring has k ring-neighbour LPUs that are
// neither held nor unhealthy.
func runFree(l *alloc.Layout, held []string, sick map[string]bool, k int) bool {
	for _, a := range l.Arcs() {
		if a.Size != k {
			continue
		}
		if !slices.ContainsFunc(l.ArcIDs(a), func(id string) bool { return slices.Contains(held, id) || sick[id] }) {
			return true
		}
	}
	return false
}

// oneRun reports whether single-LPU arcs, in the order given, walk one
// ring forward from the first, wrapping at its end.
func oneRun(l *alloc.Layout, arcs []alloc.Arc) bool {
	n := len(l.Rings()[arcs[0].Ring])
	for i, a := range arcs {
		if a.Ring != arcs[0].Ring || a.Start != (arcs[0].Start+i)%n {
			return false
		}
	}
	return true
}

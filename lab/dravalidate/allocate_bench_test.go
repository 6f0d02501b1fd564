package dravalidate

import (
	"context"
	"fmt"
	"sort"
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

	"github.com/hyperaccel/lpu-node/pkg/alloc"
	"github.com/hyperaccel/lpu-node/pkg/arcslice"
	"github.com/hyperaccel/lpu-node/pkg/device/devicetest"
	"github.com/hyperaccel/lpu-node/pkg/inject"
	"github.com/hyperaccel/lpu-node/test/dravalidate/dratest"
)

// clusterSlices is lpu-dra's slices for n nodes of one ring of 8, as the
// scheduler's informer holds them; sizes as config dra.arcSizes.
func clusterSlices(b testing.TB, n int, sizes []int) []*resourcev1.ResourceSlice {
	b.Helper()
	var out []*resourcev1.ResourceSlice
	for i := 0; i < n; i++ {
		built := dratest.Build(b, devicetest.Inventory(1, 8), arcslice.Options{Sizes: sizes}, nil)
		out = append(out, dratest.PoolSlices(fmt.Sprintf("node-%04d", i), built)...)
	}
	return out
}

// bySize re-sorts each slice's devices by arc size, stably: the order
// lpu-dra published before it interleaved the sizes.
func bySize(in []*resourcev1.ResourceSlice) []*resourcev1.ResourceSlice {
	out := make([]*resourcev1.ResourceSlice, len(in))
	for i, s := range in {
		c := s.DeepCopy()
		sort.SliceStable(c.Spec.Devices, func(x, y int) bool {
			ax, _ := arcslice.ParseDeviceName(c.Spec.Devices[x].Name)
			ay, _ := arcslice.ParseDeviceName(c.Spec.Devices[y].Name)
			return ax.Size < ay.Size
		})
		out[i] = c
	}
	return out
}

// BenchmarkSchedulerAllocate runs the scheduler's own allocator, with the
// features kube-scheduler v1.37.2 enables by default, the way its DRA
// plugin does for one pod with a k-arc claim: PreFilter builds an
// allocator over every slice in the cluster (per pod), Filter calls
// Allocate once per node it checks (per pod and node), and Allocate
// evaluates the claim's CEL selectors device after device, in published
// order, until one fits. Filter runs on 1,000 nodes with
//   - arcs=57: every arc published, arcs=25: the chart's sizes 1, 2, 4, 8;
//   - claim=shipped: the chart's lpu-arc-<k> (the size class carries the
//     selector), claim=selector: the generic class plus a request selector
//     on the size (the chart's template before, two CEL programs a device);
//   - order=interleaved: what lpu-dra publishes, order=by-size: before;
//   - node=empty, or node=no-fit: every other LPU held, so no 2-, 4- or
//     8-arc fits and Allocate looks at every device and fails.
func BenchmarkSchedulerAllocate(b *testing.B) {
	classes, _ := dratest.DefaultedChart(b)
	claimOf := func(req resourcev1.ExactDeviceRequest) []*resourcev1.ResourceClaim {
		c := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "default", UID: apitypes.UID("uid-c")},
			Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "lpus", Exactly: &req}}}}}
		legacyscheme.Scheme.Default(c)
		return []*resourcev1.ResourceClaim{c}
	}
	features := dratest.SchedulerFeatures()
	cache := cel.NewCache(10, cel.Features{})
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-0500"}}
	newAllocator := func(b *testing.B, slices []*resourcev1.ResourceSlice, noFit bool) structured.Allocator {
		held := sets.New[structured.DeviceID]()
		if noFit {
			for _, start := range []int{1, 3, 5, 7} {
				held.Insert(structured.MakeDeviceID(inject.Driver, node.Name, arcslice.DeviceName(alloc.Arc{Start: start, Size: 1})))
			}
		}
		a, err := structured.NewAllocator(context.Background(), features, structured.AllocatedState{AllocatedDevices: held,
			AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](), AggregatedCapacity: structured.NewConsumedCapacityCollection()},
			dratest.Lister(classes), slices, cache)
		if err != nil {
			b.Fatal(err)
		}
		return a
	}
	chart := []int{1, 2, 4, 8}
	for _, n := range []int{100, 1000} {
		slices := clusterSlices(b, n, chart)
		b.Run(fmt.Sprintf("prefilter/nodes=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				newAllocator(b, slices, false)
			}
		})
	}
	every, offered := clusterSlices(b, 1000, nil), clusterSlices(b, 1000, chart)
	for _, v := range []struct {
		slices      []*resourcev1.ResourceSlice
		arcs, size  int
		claim       string
		order, node string
	}{
		{bySize(every), 57, 4, "selector", "by-size", "empty"},
		{bySize(offered), 25, 4, "shipped", "by-size", "empty"},
		{every, 57, 4, "selector", "interleaved", "empty"},
		{offered, 25, 1, "shipped", "interleaved", "empty"},
		{offered, 25, 2, "shipped", "interleaved", "empty"},
		{offered, 25, 4, "shipped", "interleaved", "empty"},
		{offered, 25, 8, "shipped", "interleaved", "empty"},
		{bySize(offered), 25, 4, "shipped", "by-size", "no-fit"},
		{offered, 25, 4, "shipped", "interleaved", "no-fit"},
	} {
		req := resourcev1.ExactDeviceRequest{DeviceClassName: fmt.Sprintf("lpu-arc-%d.hyperaccel.ai", v.size)}
		if v.claim == "selector" {
			req = resourcev1.ExactDeviceRequest{DeviceClassName: inject.Driver, Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{
				Expression: fmt.Sprintf(`device.attributes["lpu.hyperaccel.ai"].size == %d`, v.size)}}}}
		}
		claim := claimOf(req)
		b.Run(fmt.Sprintf("filter/arcs=%d/size=%d/claim=%s/order=%s/node=%s", v.arcs, v.size, v.claim, v.order, v.node), func(b *testing.B) {
			a := newAllocator(b, v.slices, v.node == "no-fit")
			b.ReportAllocs()
			for b.Loop() {
				res, err := a.Allocate(context.Background(), node, claim)
				if err != nil {
					b.Fatal(err)
				}
				if v.node == "no-fit" {
					if len(res) != 0 {
						b.Fatalf("allocated %v on a node with no %d-arc free", res, v.size)
					}
					continue
				}
				if len(res) != 1 || len(res[0].Devices.Results) != 1 || !strings.HasSuffix(res[0].Devices.Results[0].Device, fmt.Sprintf("-size%d", v.size)) {
					b.Fatalf("allocate on %s: %v", node.Name, res)
				}
			}
		})
	}
}

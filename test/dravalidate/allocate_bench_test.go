package dravalidate

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apitypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/component-base/featuregate"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	kubefeatures "k8s.io/kubernetes/pkg/features"

	"github.com/hyperaccel/lpu-node/pkg/arcslice"
)

// clusterSlices is lpu-dra's slices for n nodes of one ring of 8, as the
// scheduler's informer holds them; sizes as config dra.arcSizes.
func clusterSlices(b testing.TB, n int, sizes []int) []*resourcev1.ResourceSlice {
	b.Helper()
	var out []*resourcev1.ResourceSlice
	for i := 0; i < n; i++ {
		built, err := arcslice.Build(inventory(1, 8), arcslice.Options{Sizes: sizes})
		if err != nil {
			b.Fatal(err)
		}
		node := fmt.Sprintf("node-%04d", i)
		for j, s := range built {
			out = append(out, &resourcev1.ResourceSlice{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%02x", node, j)},
				Spec: resourcev1.ResourceSliceSpec{Driver: arcslice.Driver, NodeName: &node, Devices: s.Devices, SharedCounters: s.SharedCounters,
					Pool: resourcev1.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: int64(len(built))}},
			})
		}
	}
	return out
}

// BenchmarkSchedulerAllocate runs the scheduler's own allocator, with the
// features kube-scheduler v1.37.2 enables by default, the way its DRA
// plugin does for one pod with a 4-arc claim: PreFilter builds an
// allocator over every slice in the cluster (per pod), Filter calls
// Allocate once per node it checks (per pod and node). Filter runs on
// 1,000 nodes with
//   - arcs=57: every arc published, arcs=25: the chart's sizes 1, 2, 4, 8;
//   - claim=shipped: the chart's lpu-arc-4 (the size class carries the
//     selector), claim=selector: the generic class plus a request selector
//     on the size (the chart's template before, two CEL programs a device).
func BenchmarkSchedulerAllocate(b *testing.B) {
	classes, templates := chartObjects(b)
	for _, dc := range classes {
		legacyscheme.Scheme.Default(dc)
	}
	claimOf := func(spec resourcev1.ResourceClaimSpec) *resourcev1.ResourceClaim {
		c := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "default", UID: apitypes.UID("uid-c")}, Spec: *spec.DeepCopy()}
		legacyscheme.Scheme.Default(c)
		return c
	}
	claims := map[string]*resourcev1.ResourceClaim{"selector": claimOf(resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{
		Name: "lpus", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: arcslice.Driver,
			Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: `device.attributes["lpu.hyperaccel.ai"].size == 4`}}}}}}}})}
	for _, rct := range templates {
		if rct.Name == "lpu-arc-4" {
			claims["shipped"] = claimOf(rct.Spec.Spec)
		}
	}
	if claims["shipped"] == nil {
		b.Fatal("no template lpu-arc-4")
	}
	features := schedulerFeatures()
	cache := cel.NewCache(10, cel.Features{})
	newAllocator := func(b *testing.B, slices []*resourcev1.ResourceSlice) structured.Allocator {
		a, err := structured.NewAllocator(context.Background(), features, structured.AllocatedState{AllocatedDevices: sets.New[structured.DeviceID](),
			AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](), AggregatedCapacity: structured.NewConsumedCapacityCollection()},
			lister(classes), slices, cache)
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
				newAllocator(b, slices)
			}
		})
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-0500"}}
	for _, v := range []struct {
		sizes []int
		claim string
	}{{nil, "selector"}, {nil, "shipped"}, {chart, "selector"}, {chart, "shipped"}} {
		slices := clusterSlices(b, 1000, v.sizes)
		arcs := 57
		if v.sizes != nil {
			arcs = 25
		}
		b.Run(fmt.Sprintf("filter/arcs=%d/claim=%s", arcs, v.claim), func(b *testing.B) {
			a := newAllocator(b, slices)
			claim := []*resourcev1.ResourceClaim{claims[v.claim]}
			b.ReportAllocs()
			for b.Loop() {
				res, err := a.Allocate(context.Background(), node, claim)
				if err != nil || len(res) != 1 || len(res[0].Devices.Results) != 1 {
					b.Fatalf("allocate on %s: %v, %v", node.Name, res, err)
				}
				if d := res[0].Devices.Results[0].Device; !strings.HasSuffix(d, "-size4") {
					b.Fatalf("allocated %s, not a 4-arc", d)
				}
			}
		})
	}
}

// schedulerFeatures is the allocator feature set kube-scheduler v1.37.2
// derives from its default feature gates (dynamicresources.AllocatorFeatures;
// that package is not imported for it, it drags in the whole scheduler).
func schedulerFeatures() structured.Features {
	on := func(f featuregate.Feature) bool { return utilfeature.DefaultFeatureGate.Enabled(f) }
	return structured.Features{
		AdminAccess:             on(kubefeatures.DRAAdminAccess),
		PrioritizedList:         on(kubefeatures.DRAPrioritizedList),
		PartitionableDevices:    on(kubefeatures.DRAPartitionableDevices),
		DeviceTaints:            on(kubefeatures.DRADeviceTaints),
		DeviceBindingAndStatus:  on(kubefeatures.DRADeviceBindingConditions) && on(kubefeatures.DRAResourceClaimDeviceStatus),
		ConsumableCapacity:      on(kubefeatures.DRAConsumableCapacity),
		FractionalCapacityRange: on(kubefeatures.DRAFractionalCapacityRange),
		ListTypeAttributes:      on(kubefeatures.DRAListTypeAttributes),
		OptionalNodeOperations:  on(kubefeatures.DRAOptionalNodeOperations),
		DerivedAttributes:       on(kubefeatures.DRADerivedAttributes),
		CompatibilityGroups:     on(kubefeatures.DRADeviceCompatibilityGroups),
	}
}

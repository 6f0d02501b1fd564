// Package dratest is the test kit of test/dravalidate and lab/dravalidate:
// the chart's DeviceClasses and ResourceClaimTemplates, lpu-dra's slices as
// the scheduler's informer holds them, random node states and the
// allocator features kube-scheduler v1.37.2 enables by default. It is a
// package, not a test file, so that the lab module can import it.
package dratest

import (
	"fmt"
	"math/rand/v2"
	"os"
	"regexp"
	"slices"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apitypes "k8s.io/apimachinery/pkg/types"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/component-base/featuregate"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	"k8s.io/kubernetes/pkg/apis/resource"
	_ "k8s.io/kubernetes/pkg/apis/resource/install" // the resource group's defaults and conversions in legacyscheme
	kubefeatures "k8s.io/kubernetes/pkg/features"
	"sigs.k8s.io/yaml"

	"github.com/hyperaccel/lpu-node/pkg/alloc"
	"github.com/hyperaccel/lpu-node/pkg/arcslice"
	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/inject"
)

// Manifests is the rendered mode=dra chart, relative to a test package two
// directories below the repository root (test/dravalidate, lab/dravalidate),
// where go test runs it.
const Manifests = "../../deploy/manifests/lpu-node-dra.yaml"

var docSep = regexp.MustCompile(`(?m)^---\s*$`)

// Internal converts a v1 object to the API server's internal type, as
// the server does before validating.
func Internal(tb testing.TB, in *resourcev1.ResourceSlice) *resource.ResourceSlice {
	tb.Helper()
	legacyscheme.Scheme.Default(in)
	out := &resource.ResourceSlice{}
	if err := legacyscheme.Scheme.Convert(in, out, nil); err != nil {
		tb.Fatal(err)
	}
	return out
}

// ChartObjects returns the DeviceClasses and ResourceClaimTemplates of the
// rendered mode=dra chart (Manifests).
func ChartObjects(tb testing.TB) ([]*resourcev1.DeviceClass, []*resourcev1.ResourceClaimTemplate) {
	tb.Helper()
	data, err := os.ReadFile(Manifests)
	if err != nil {
		tb.Fatal(err)
	}
	var classes []*resourcev1.DeviceClass
	var templates []*resourcev1.ResourceClaimTemplate
	for _, doc := range docSep.Split(string(data), -1) {
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
			tb.Fatal(err)
		}
		switch tm.Kind {
		case "DeviceClass":
			var dc resourcev1.DeviceClass
			if err := yaml.UnmarshalStrict([]byte(doc), &dc); err != nil {
				tb.Fatal(err)
			}
			classes = append(classes, &dc)
		case "ResourceClaimTemplate":
			var rct resourcev1.ResourceClaimTemplate
			if err := yaml.UnmarshalStrict([]byte(doc), &rct); err != nil {
				tb.Fatal(err)
			}
			templates = append(templates, &rct)
		}
	}
	if len(classes) < 2 || len(templates) < 2 {
		tb.Fatalf("%s: %d device classes, %d claim templates", Manifests, len(classes), len(templates))
	}
	return classes, templates
}

// DefaultedChart is ChartObjects with the DeviceClasses defaulted as the
// API server would, as the scheduler's allocator gets them.
func DefaultedChart(tb testing.TB) ([]*resourcev1.DeviceClass, []*resourcev1.ResourceClaimTemplate) {
	tb.Helper()
	classes, templates := ChartObjects(tb)
	for _, dc := range classes {
		legacyscheme.Scheme.Default(dc)
	}
	return classes, templates
}

// TemplateClaims is a claim from each of templates (TemplateClaim), in
// their order.
func TemplateClaims(tb testing.TB, templates []*resourcev1.ResourceClaimTemplate) []*resourcev1.ResourceClaim {
	tb.Helper()
	var claims []*resourcev1.ResourceClaim
	for _, rct := range templates {
		claims = append(claims, TemplateClaim(tb, templates, rct.Name))
	}
	return claims
}

// TemplateClaim is a claim from the chart's template name, defaulted as
// the API server would.
func TemplateClaim(tb testing.TB, templates []*resourcev1.ResourceClaimTemplate, name string) *resourcev1.ResourceClaim {
	tb.Helper()
	for _, rct := range templates {
		if rct.Name == name {
			c := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: apitypes.UID("uid-" + name)},
				Spec: *rct.Spec.Spec.DeepCopy()}
			legacyscheme.Scheme.Default(c)
			return c
		}
	}
	tb.Fatalf("the chart has no %s template", name)
	return nil
}

// Lister serves DeviceClasses to the scheduler's allocator
// (structured.DeviceClassLister) from a fixed list.
type Lister []*resourcev1.DeviceClass

// List returns every class.
func (l Lister) List() ([]*resourcev1.DeviceClass, error) { return l, nil }

// Get returns the class called name.
func (l Lister) Get(name string) (*resourcev1.DeviceClass, error) {
	for _, c := range l {
		if c.Name == name {
			return c, nil
		}
	}
	return nil, fmt.Errorf("no device class %q", name)
}

// Build is what lpu-dra publishes for inv with held taken: its builder's
// slices, inv's unhealthy LPUs tainted.
func Build(tb testing.TB, inv *device.Inventory, opts arcslice.Options, held []string) []resourceslice.Slice {
	tb.Helper()
	b, err := arcslice.NewBuilder(inv, opts)
	if err != nil {
		tb.Fatal(err)
	}
	return b.Slices(held, arcslice.Unhealthy(inv))
}

// PoolSlices are the ResourceSlice objects of one node's pool as the
// resourceslice controller stores them, named so that name order is
// publication order.
func PoolSlices(node string, built []resourceslice.Slice) []*resourcev1.ResourceSlice {
	out := make([]*resourcev1.ResourceSlice, len(built))
	for j, s := range built {
		out[j] = &resourcev1.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%02x", node, j)},
			Spec: resourcev1.ResourceSliceSpec{Driver: inject.Driver, NodeName: &node, Devices: s.Devices, SharedCounters: s.SharedCounters,
				Pool: resourcev1.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: int64(len(built))}},
		}
	}
	return out
}

// NodeState is one node as lpu-dra sees it: the arcs its prepared claims
// hold and its unhealthy LPUs.
type NodeState struct {
	Allocated []alloc.Arc
	Held      []string
	Sick      []int // indices into the inventory's devices
}

// RandomState places up to 7 random non-overlapping arcs of sizes (nil:
// any) and, one time in four, marks an LPU unhealthy. (An allocated arc
// of a size the full pool does not publish would make the comparison
// meaningless: the allocator does not count the counters of a device it
// cannot find, so on the full pool it hands out arcs overlapping it,
// which is why FreeSlices keeps such an arc.)
func RandomState(rng *rand.Rand, layout *alloc.Layout, lpus int, sizes []int) NodeState {
	var s NodeState
	all := slices.DeleteFunc(layout.Arcs(), func(a alloc.Arc) bool { return sizes != nil && !slices.Contains(sizes, a.Size) })
	for range rng.IntN(8) {
		a := all[rng.IntN(len(all))]
		ids := layout.ArcIDs(a)
		if slices.ContainsFunc(ids, func(id string) bool { return slices.Contains(s.Held, id) }) {
			continue
		}
		s.Held = append(s.Held, ids...)
		s.Allocated = append(s.Allocated, a)
	}
	if rng.IntN(4) == 0 {
		s.Sick = append(s.Sick, rng.IntN(lpus))
	}
	return s
}

// SchedulerFeatures is the allocator feature set kube-scheduler v1.37.2
// derives from its default feature gates (dynamicresources.AllocatorFeatures;
// that package is not imported for it, it drags in the whole scheduler).
func SchedulerFeatures() structured.Features {
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

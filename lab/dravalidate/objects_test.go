package dravalidate

import (
	"fmt"
	"math/rand/v2"
	"os"
	"regexp"
	"slices"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	"k8s.io/kubernetes/pkg/apis/resource"
	_ "k8s.io/kubernetes/pkg/apis/resource/install"
	"sigs.k8s.io/yaml"

	"github.com/hyperaccel/lpu-node/pkg/alloc"
	"github.com/hyperaccel/lpu-node/pkg/device/devicetest"
)

// What the benchmarks share with test/dravalidate's tests (copies of its
// helpers: a test file of another module cannot be imported): lpu-dra's
// inventory, the chart's objects, random node states.

// inventory is devicetest.Inventory: rings × per healthy LPUs.
var inventory = devicetest.Inventory

// internal converts a v1 object to the API server's internal type, as
// the server does before validating.
func internal(t *testing.T, in *resourcev1.ResourceSlice) *resource.ResourceSlice {
	t.Helper()
	legacyscheme.Scheme.Default(in)
	out := &resource.ResourceSlice{}
	if err := legacyscheme.Scheme.Convert(in, out, nil); err != nil {
		t.Fatal(err)
	}
	return out
}

const manifests = "../../deploy/manifests/lpu-node-dra.yaml"

var docSep = regexp.MustCompile(`(?m)^---\s*$`)

// chartObjects returns the DeviceClasses and ResourceClaimTemplates of the
// rendered mode=dra chart.
func chartObjects(t testing.TB) ([]*resourcev1.DeviceClass, []*resourcev1.ResourceClaimTemplate) {
	t.Helper()
	data, err := os.ReadFile(manifests)
	if err != nil {
		t.Fatal(err)
	}
	var classes []*resourcev1.DeviceClass
	var templates []*resourcev1.ResourceClaimTemplate
	for _, doc := range docSep.Split(string(data), -1) {
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
			t.Fatal(err)
		}
		switch tm.Kind {
		case "DeviceClass":
			var dc resourcev1.DeviceClass
			if err := yaml.UnmarshalStrict([]byte(doc), &dc); err != nil {
				t.Fatal(err)
			}
			classes = append(classes, &dc)
		case "ResourceClaimTemplate":
			var rct resourcev1.ResourceClaimTemplate
			if err := yaml.UnmarshalStrict([]byte(doc), &rct); err != nil {
				t.Fatal(err)
			}
			templates = append(templates, &rct)
		}
	}
	if len(classes) < 2 || len(templates) < 2 {
		t.Fatalf("%s: %d device classes, %d claim templates", manifests, len(classes), len(templates))
	}
	return classes, templates
}

type lister []*resourcev1.DeviceClass

func (l lister) List() ([]*resourcev1.DeviceClass, error) { return l, nil }

func (l lister) Get(name string) (*resourcev1.DeviceClass, error) {
	for _, c := range l {
		if c.Name == name {
			return c, nil
		}
	}
	return nil, fmt.Errorf("no device class %q", name)
}

// nodeState is one node as lpu-dra sees it: the arcs its prepared claims
// hold and its unhealthy LPUs.
type nodeState struct {
	allocated []alloc.Arc
	held      []string
	sick      []int // indices into inv.Devices
}

// randomState places up to 7 random non-overlapping arcs of sizes (nil:
// any) and, one time in four, marks an LPU unhealthy. (An allocated arc
// of a size the full pool does not publish would make the comparison
// meaningless: the allocator does not count the counters of a device it
// cannot find, so on the full pool it hands out arcs overlapping it,
// which is why FreeSlices keeps such an arc.)
func randomState(rng *rand.Rand, layout *alloc.Layout, lpus int, sizes []int) nodeState {
	var s nodeState
	all := slices.DeleteFunc(layout.Arcs(), func(a alloc.Arc) bool { return sizes != nil && !slices.Contains(sizes, a.Size) })
	for range rng.IntN(8) {
		a := all[rng.IntN(len(all))]
		ids := layout.ArcIDs(a)
		if slices.ContainsFunc(ids, func(id string) bool { return slices.Contains(s.held, id) }) {
			continue
		}
		s.held = append(s.held, ids...)
		s.allocated = append(s.allocated, a)
	}
	if rng.IntN(4) == 0 {
		s.sick = append(s.sick, rng.IntN(lpus))
	}
	return s
}

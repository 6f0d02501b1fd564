package dravalidate

import (
	"slices"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"

	"github.com/hyperaccel/lpu-node/pkg/arcslice"
	"github.com/hyperaccel/lpu-node/test/dravalidate/dratest"
)

// A claim from the chart's lpu-arc-4 template never gets an arc over a
// cordoned LPU, on the real structured allocator with device taints on:
// with lpu1 cordoned (the first 4-arc of an empty ring holds it) it gets a
// 4-arc without lpu1; with lpu1 and lpu5 cordoned every 4-arc holds one,
// and it gets nothing although the arcs are published; a claim tolerating
// the cordon taint still gets one (the refusal is the taint's).
func TestCordonedLPUNeverAllocated(t *testing.T) {
	classes, templates := dratest.DefaultedChart(t)
	node := "node-a"
	b, err := arcslice.NewBuilder(inventory(1, 8), arcslice.Options{})
	if err != nil {
		t.Fatal(err)
	}
	allocate := func(cordoned map[string]bool, tolerate bool) []string {
		t.Helper()
		c := b.WithCordoned(cordoned)
		pool := dratest.PoolSlices(node, c.FreeSlices(nil, nil, nil))
		claim := arc4WithSelector(t, templates, "c", "")
		if tolerate {
			req := claim.Spec.Devices.Requests[0].Exactly
			req.Tolerations = append(req.Tolerations, resourcev1.DeviceToleration{Key: arcslice.CordonTaintKey,
				Operator: resourcev1.DeviceTolerationOpExists, Effect: resourcev1.DeviceTaintEffectNoSchedule})
		}
		res := allocateOn(t, classes, pool, node, claim)
		if len(res) == 0 {
			return nil
		}
		arc, err := arcslice.ParseDeviceName(res[0].Devices.Results[0].Device)
		if err != nil {
			t.Fatal(err)
		}
		return b.Layout().ArcIDs(arc)
	}
	if got := allocate(nil, false); !slices.Contains(got, "lpu1") {
		t.Fatalf("nothing cordoned: %v; the test needs the first 4-arc to hold lpu1", got)
	}
	if got := allocate(map[string]bool{"lpu1": true}, false); len(got) != 4 || slices.Contains(got, "lpu1") {
		t.Fatalf("lpu1 cordoned: got %v, want a 4-arc without lpu1", got)
	}
	both := map[string]bool{"lpu1": true, "lpu5": true}
	if got := allocate(both, false); got != nil {
		t.Fatalf("lpu1 and lpu5 cordoned, every 4-arc holds one: got %v, want nothing", got)
	}
	if got := allocate(both, true); len(got) != 4 {
		t.Fatalf("lpu1 and lpu5 cordoned, the claim tolerating the cordon taint: got %v, want a 4-arc", got)
	}
}

package driver

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/hyperaccel/lpu-node/internal/health/healthtest"
	"github.com/hyperaccel/lpu-node/pkg/arcslice"
	"github.com/hyperaccel/lpu-node/pkg/cordon"
)

// cordonedArcs says whether the arcs holding lpu are exactly the ones
// tainted CordonTaintKey=lpu (none when !on), and that there are some.
func cordonedArcs(lpu string, on bool) func([]resourceapi.Device, int) bool {
	return func(devs []resourceapi.Device, _ int) bool {
		holding := 0
		for _, d := range devs {
			lpus := d.Attributes["lpus"].StringValue
			if lpus == nil {
				return false
			}
			holds := false
			for _, id := range strings.Split(*lpus, ",") {
				holds = holds || id == lpu
			}
			tainted := false
			for _, t := range d.Taints {
				tainted = tainted || t.Key == arcslice.CordonTaintKey && t.Value == lpu && t.Effect == resourceapi.DeviceTaintEffectNoSchedule
			}
			if tainted != (holds && on) {
				return false
			}
			if holds {
				holding++
			}
		}
		return holding > 0
	}
}

// setCordon merge-patches the Node's cordoned-LPU annotation (nil
// removes it), as kubectl lpu cordon does.
func (l *live) setCordon(tb testing.TB, value any) {
	tb.Helper()
	b, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{cordon.Annotation: value}}})
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := l.client.CoreV1().Nodes().Patch(context.Background(), node, types.MergePatchType, b, metav1.PatchOptions{}); err != nil {
		tb.Fatal(err)
	}
}

// Cordon latency on a real API server: from the Node annotation patch to
// every arc holding the LPU tainted in the stored ResourceSlices (the
// cordon.Watcher's watch event, the publisher's republish, the kubelet
// plugin helper's slice update), and back on uncordon.
func TestCordonReachesAPIServer(t *testing.T) {
	l := startLiveWith(t, healthtest.Ring(8), true)
	l.waitFor(t, 30*time.Second, cordonedArcs("lpu3", false))
	start := time.Now()
	l.setCordon(t, "lpu3")
	l.waitFor(t, 5*time.Second, cordonedArcs("lpu3", true))
	t.Logf("cordon: annotation patch → arcs over lpu3 tainted in the API server: %v", time.Since(start))
	start = time.Now()
	l.setCordon(t, nil)
	l.waitFor(t, 5*time.Second, cordonedArcs("lpu3", false))
	t.Logf("uncordon: annotation removed → taints gone in the API server: %v", time.Since(start))
}

func BenchmarkCordonReachesAPIServer(b *testing.B) {
	l := startLiveWith(b, healthtest.Ring(8), true)
	l.waitFor(b, 30*time.Second, cordonedArcs("lpu3", false))
	var worst time.Duration
	for b.Loop() {
		start := time.Now()
		l.setCordon(b, "lpu3")
		l.waitFor(b, 5*time.Second, cordonedArcs("lpu3", true))
		worst = max(worst, time.Since(start))
		b.StopTimer()
		l.setCordon(b, nil)
		l.waitFor(b, 5*time.Second, cordonedArcs("lpu3", false))
		b.StartTimer()
	}
	b.ReportMetric(float64(worst.Microseconds())/1000, "worst-ms")
}

package driver

import (
	"testing"

	"github.com/hyperaccel/lpu-node/internal/health/healthtest"
	"github.com/hyperaccel/lpu-node/pkg/alloc"
	"github.com/hyperaccel/lpu-node/pkg/arcslice"
)

// count is a count device of ring 0 at start.
func count(start int) alloced {
	return alloced{pool: node, device: arcslice.CountDeviceName(alloc.Arc{Ring: 0, Start: start, Size: 1})}
}

// Claims of count devices (a pod's plain hyperaccel.ai/lpu: k) prepare
// like singles, in ring order, and are counted by shape: ring neighbours
// (also across the wrap) as arc, others as scattered; a claim of arcs is
// not counted.
func TestCountClaimsCountedByShape(t *testing.T) {
	e := newEnv(t, healthtest.New(t, healthtest.Ring(8)))
	shape := func(s string) float64 { t.Helper(); return labelled(t, e.metrics, MetricCountClaims, "shape", s) }
	if r := e.prepare(claim("wrap", count(7), count(0), count(1))); r.Err != nil {
		t.Fatal(r.Err)
	}
	if got, ok := e.d.Prepared()["wrap"]; !ok || len(got.LPUs) != 3 || got.LPUs[0] != "lpu7" || got.LPUs[2] != "lpu1" {
		t.Fatalf("prepared %+v, want lpu7 lpu0 lpu1", got)
	}
	if r := e.prepare(claim("apart", count(3), count(5))); r.Err != nil {
		t.Fatal(r.Err)
	}
	if r := e.prepare(claim("arc", arc(4, 1))); r.Err != nil {
		t.Fatal(r.Err)
	}
	if a, s := shape("arc"), shape("scattered"); a != 1 || s != 1 {
		t.Fatalf("count claims: arc %v, scattered %v; want 1 and 1", a, s)
	}
	// A count device over an LPU an arc holds is refused like the arc.
	if r := e.prepare(claim("overlap", count(4))); r.Err == nil {
		t.Fatal("prepared a count device over lpu4, which claim arc holds")
	}
}

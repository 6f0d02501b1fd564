package driver

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	checkpoint "github.com/hyperaccel/lpu-node/internal/dracheckpoint"
	"github.com/hyperaccel/lpu-node/internal/health/healthtest"
	"github.com/hyperaccel/lpu-node/pkg/alloc"
	"github.com/hyperaccel/lpu-node/pkg/arcslice"
)

func reservedFor(c *resourceapi.ResourceClaim, podUIDs ...string) *resourceapi.ResourceClaim {
	c = c.DeepCopy()
	c.Status.ReservedFor = nil
	for _, uid := range podUIDs {
		c.Status.ReservedFor = append(c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: "p-" + uid, UID: types.UID(uid)})
	}
	return c
}

// Prepare records the claim's reservedFor; the kubelet never calls it
// again for a pod that joins later, so SyncReservedFor (the apiserver's
// reservedFor) is what admits or drops later pods, across restarts.
func TestSyncReservedFor(t *testing.T) {
	e := newEnv(t, healthtest.New(t, healthtest.Ring(8)))
	c := claim("u1", arc(0, 2))
	if r := e.prepare(c); r.Err != nil {
		t.Fatal(r.Err)
	}
	admits := func(pod string) error {
		_, err := checkpoint.PodLPUs(e.stateDir, pod, []string{"u1"})
		return err
	}
	if err := admits("pod-uid-u1"); err != nil {
		t.Fatal(err)
	}
	if err := admits("pod-2"); !errors.Is(err, checkpoint.ErrNotReserved) {
		t.Fatalf("a pod the claim is not reserved for: %v", err)
	}
	steps := []struct {
		claim   *resourceapi.ResourceClaim
		changed bool
		pods    []string
	}{
		{reservedFor(c, "pod-uid-u1", "pod-2"), true, []string{"pod-2", "pod-uid-u1"}},
		{reservedFor(c, "pod-2", "pod-uid-u1"), false, []string{"pod-2", "pod-uid-u1"}},
		{reservedFor(c, "pod-2"), true, []string{"pod-2"}},
		{nil, true, nil}, // deleted on the apiserver
		{reservedFor(c, "pod-3"), true, []string{"pod-3"}},
	}
	recreated := reservedFor(c, "pod-4")
	recreated.UID = "u1-new"
	notAllocated := reservedFor(c, "pod-5")
	notAllocated.Status.Allocation = nil
	steps = append(steps, struct {
		claim   *resourceapi.ResourceClaim
		changed bool
		pods    []string
	}{recreated, true, nil}, struct {
		claim   *resourceapi.ResourceClaim
		changed bool
		pods    []string
	}{notAllocated, false, nil})
	for i, st := range steps {
		changed, err := e.d.SyncReservedFor(context.Background(), "u1", st.claim)
		if err != nil || changed != st.changed {
			t.Fatalf("step %d: SyncReservedFor = %v, %v; want changed %v", i, changed, err, st.changed)
		}
		e.restart() // what lpu-nri and a new lpu-dra read is the checkpoint
		if got := e.d.Prepared()["u1"].Pods; !slices.Equal(got, st.pods) {
			t.Fatalf("step %d: pods %v, want %v", i, got, st.pods)
		}
		for _, pod := range []string{"pod-uid-u1", "pod-2", "pod-3", "pod-4", "pod-5"} {
			if err := admits(pod); (err == nil) != slices.Contains(st.pods, pod) {
				t.Fatalf("step %d: pod %s admitted = %v, want %v", i, pod, err == nil, slices.Contains(st.pods, pod))
			}
		}
	}
	if changed, err := e.d.SyncReservedFor(context.Background(), "unknown", c); changed || err != nil {
		t.Fatalf("unknown claim: %v, %v", changed, err)
	}
	if got := e.d.PreparedClaims(); len(got) != 1 || got[0].Name != "claim-u1" || got[0].Namespace != "default" || got[0].UID != "u1" {
		t.Fatalf("PreparedClaims = %+v", got)
	}
}

// A repeated Prepare (a kubelet restart) takes the reservedFor it is given.
func TestRepeatedPrepareTakesReservedFor(t *testing.T) {
	e := newEnv(t, healthtest.New(t, healthtest.Ring(8)))
	c := claim("u1", arc(0, 2))
	e.prepare(c)
	if r := e.prepare(reservedFor(c, "pod-9")); r.Err != nil {
		t.Fatal(r.Err)
	}
	if got := e.d.Prepared()["u1"].Pods; !slices.Equal(got, []string{"pod-9"}) {
		t.Fatalf("pods %v", got)
	}
}

func adminClaim(uid string, results ...alloced) *resourceapi.ResourceClaim {
	c := claim(uid, results...)
	yes := true
	for i := range c.Status.Allocation.Devices.Results {
		c.Status.Allocation.Devices.Results[i].AdminAccess = &yes
	}
	return c
}

// An admin claim holds nothing: it prepares on a tenant's LPUs and a
// tenant prepares on its LPUs, in either order; it gets the device nodes;
// the published order ignores it.
func TestAdminAccessClaims(t *testing.T) {
	for _, adminFirst := range []bool{true, false} {
		e := newEnv(t, healthtest.New(t, healthtest.Ring(8)))
		admin, tenant := adminClaim("admin", arc(0, 8)), claim("tenant", arc(0, 4))
		order := []*resourceapi.ResourceClaim{tenant, admin}
		if adminFirst {
			order = []*resourceapi.ResourceClaim{admin, tenant}
		}
		for _, c := range order {
			if r := e.prepare(c); r.Err != nil {
				t.Fatalf("adminFirst=%v: prepare %s: %v", adminFirst, c.Name, r.Err)
			}
		}
		if nodes, _, _ := e.injected("admin"); len(nodes) != 8 {
			t.Fatalf("admin claim device nodes %v, want all 8", nodes)
		}
		if p := e.d.Prepared()["admin"]; !p.AdminAccess || e.d.Prepared()["tenant"].AdminAccess {
			t.Fatalf("adminAccess recorded wrong: %+v", e.d.Prepared())
		}
		if h := e.d.state.Current().Held(); !slices.Equal(h, []string{"lpu0", "lpu1", "lpu2", "lpu3"}) {
			t.Fatalf("held %v, want only the tenant's", h)
		}
		// A second tenant is still refused on the first tenant's LPUs, and
		// the message names the tenant, not the admin claim.
		r := e.prepare(claim("other", arc(2, 2)))
		if r.Err == nil || !strings.Contains(r.Err.Error(), "held by claim default/claim-tenant") {
			t.Fatalf("second tenant: %v", r.Err)
		}
		if r := e.prepare(claim("free", arc(4, 4))); r.Err != nil {
			t.Fatalf("tenant on LPUs only the admin claim has: %v", r.Err)
		}
		// Restarted, the admin claim still holds nothing.
		e.restart()
		if h := e.d.state.Current().Held(); !slices.Equal(h, []string{"lpu0", "lpu1", "lpu2", "lpu3", "lpu4", "lpu5", "lpu6", "lpu7"}) {
			t.Fatalf("held after restart %v", h)
		}
		for _, uid := range []string{"free", "tenant", "admin"} {
			if err := e.unprepare(uid); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// A claim whose devices of ours are partly admin is refused: holding is
// per claim.
func TestMixedAdminClaimRefused(t *testing.T) {
	e := newEnv(t, healthtest.New(t, healthtest.Ring(8)))
	c := claim("mixed", arc(0, 2), alloced{pool: node, device: arcslice.DeviceName(alloc.Arc{Ring: 0, Start: 4, Size: 2}), request: "b"})
	yes := true
	c.Status.Allocation.Devices.Results[0].AdminAccess = &yes
	if r := e.prepare(c); r.Err == nil || !strings.Contains(r.Err.Error(), "mixes adminAccess") {
		t.Fatalf("mixed claim: %v", r.Err)
	}
}

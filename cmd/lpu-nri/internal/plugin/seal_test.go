package plugin

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"

	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/ledger"
	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/verify"
	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/verify/verifytest"
	"github.com/hyperaccel/lpu-node/internal/nritest"
	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/inject"
)

func TestConcurrentCreateContainer(t *testing.T) {
	const n = 200
	f := newFixture(t, 64, false)
	rt := nritest.New(t)
	rt.Start(t)
	f.connect(t, rt)
	rt.WaitPlugins(t, 1)

	allocs := verifytest.Arcs(64, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i, ids := range allocs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("c%d", i)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			rsp, err := rt.CreateContainer(ctx, pod(name, nil), ctr(name, seal(t, f.key, ids...)))
			if err != nil {
				errs <- fmt.Errorf("%s %v: %w", name, ids, err)
				return
			}
			var want []string
			var vis []string
			for _, id := range ids {
				idx, _ := device.ParseID(id)
				want = append(want, dev(idx))
				vis = append(vis, fmt.Sprint(idx))
			}
			v := viewOf(rsp.GetAdjust())
			if !slices.Equal(v.Devices, want) || v.Env[0] != "LPU_VISIBLE_DEVICES="+strings.Join(vis, ",") {
				errs <- fmt.Errorf("%s %v: got devices %v env %v", name, ids, v.Devices, v.Env)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := counter(t, f.p.Metrics().Injections); got != n {
		t.Fatalf("injections = %v, want %d", got, n)
	}
}

// TestLegacySeals: the v1 form (before node binding) opens only behind the
// migration switch, with or without an allocation ID, through the runtime.
func TestLegacySeals(t *testing.T) {
	ids := []string{"lpu2", "lpu3"}
	for name, accept := range map[string]bool{"switch off": false, "switch on": true} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, 8, false, func(c *Config) { c.AcceptLegacySeals = accept })
			rt := nritest.New(t)
			rt.Start(t)
			f.connect(t, rt)
			rt.WaitPlugins(t, 1)
			withID, err := f.legacy.AnnotationsV1WithID(ids, inject.NewAllocationID())
			if err != nil {
				t.Fatal(err)
			}
			for form, ann := range map[string]map[string]string{"no ID": f.legacy.AnnotationsV1(ids), "with ID": withID} {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				rsp, err := rt.CreateContainer(ctx, pod("l", nil), ctr("l", ann))
				cancel()
				got := viewOf(rsp.GetAdjust()).Devices
				switch {
				case accept && (err != nil || !slices.Equal(got, []string{dev(2), dev(3)})):
					t.Errorf("%s: accepted form got %v, %v", form, got, err)
				case !accept && (err == nil || !strings.Contains(err.Error(), "legacy v1 form")):
					t.Errorf("%s: v1 seal with the switch off: %v, %v", form, got, err)
				}
			}
		})
	}
}

// TestReplayedAllocation: the allocation ID belongs to the first pod that
// used it. Restarts of its containers and its other containers keep
// working; another pod presenting the same sealed annotations is refused,
// also after lpu-nri restarts (the ledger is on disk).
func TestReplayedAllocation(t *testing.T) {
	state := t.TempDir()
	withLedger := func(c *Config) {
		l, err := ledger.Open(state)
		if err != nil {
			t.Fatal(err)
		}
		c.Ledger = l
	}
	f := newFixture(t, 8, false, withLedger)
	rt := nritest.New(t)
	rt.Start(t)
	f.connect(t, rt)
	rt.WaitPlugins(t, 1)
	create := func(rt *nritest.Runtime, p *api.PodSandbox, c *api.Container) error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := rt.CreateContainer(ctx, p, c)
		return err
	}
	victim := pod("victim", nil)
	ann := seal(t, f.key, "lpu4", "lpu5")
	initAnn := seal(t, f.key, "lpu4", "lpu5") // kubelet reuses the init container's devices
	for i, c := range []*api.Container{ctr("victim", initAnn), ctr("victim", ann), ctr("victim", ann), ctr("victim", ann)} {
		if err := create(rt, victim, c); err != nil {
			t.Fatalf("victim's container %d (init, app, restarts): %v", i, err)
		}
	}
	thief := pod("thief", nil)
	err := create(rt, thief, ctr("thief", ann))
	if err == nil || !strings.Contains(err.Error(), "already used by another pod") || !strings.Contains(err.Error(), victim.GetUid()) {
		t.Fatalf("replay in another pod: %v, want a refusal naming %s", err, victim.GetUid())
	}
	if got := counter(t, f.p.Metrics().Refusals.WithLabelValues(verify.ReasonReplayed)); got != 1 {
		t.Errorf("refusals{reason=replayed} = %v, want 1", got)
	}

	// A new lpu-nri over the same state dir remembers.
	f2 := newFixture(t, 8, false, withLedger)
	if _, _, err := f2.p.verifier.Decide(context.Background(), thief, ctr("thief", ann)); err == nil {
		t.Fatal("replay accepted after restart")
	}
	if _, _, err := f2.p.verifier.Decide(context.Background(), victim, ctr("victim", ann)); err != nil {
		t.Fatalf("victim's restart after lpu-nri restart: %v", err)
	}
}

package verify_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/verify"
	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/verify/verifytest"
	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/device/devicetest"
	"github.com/hyperaccel/lpu-node/pkg/inject"
)

// The kit's pods, containers and seals under short names.
var (
	pod  = verifytest.Pod
	ctr  = verifytest.Ctr
	seal = verifytest.Seal
)

// newVerifier returns the rules on a node of n LPUs (lpu5 unhealthy when
// sick), with opts applied to the kit's config.
func newVerifier(t testing.TB, n int, sick bool, opts ...func(*verify.Config)) (*verifytest.Node, *verify.Verifier) {
	t.Helper()
	nd := verifytest.NewNode(t, n, sick)
	cfg := nd.Config()
	for _, o := range opts {
		o(&cfg)
	}
	v, err := verify.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return nd, v
}

// TestConcurrentDecide runs the decision itself in parallel (the runtime
// serialises CreateContainer), under -race, while the inventory refreshes.
func TestConcurrentDecide(t *testing.T) {
	nd, v := newVerifier(t, 64, false)
	allocs := verifytest.Arcs(64, 200)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for ctx.Err() == nil {
			_, _ = nd.Store.Refresh(ctx)
		}
	}()
	var wg sync.WaitGroup
	for i, ids := range allocs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("c%d", i)
			adj, alloc, err := v.Decide(ctx, pod(name, nil), ctr(name, seal(t, nd.Key, ids...)))
			if err != nil || !slices.Equal(alloc.IDs, ids) || len(adj.GetLinux().GetDevices()) != len(ids) {
				t.Errorf("%s: Decide(%v) = %v, %v", name, ids, alloc.IDs, err)
			}
		}()
	}
	wg.Wait()
}

func TestPodResourcesCrossCheck(t *testing.T) {
	errMismatch := errors.New("kubelet says lpu0")
	tests := map[string]struct {
		check  verify.CrossChecker
		reason string
	}{
		"agrees":    {check: checkFunc(func([]string) error { return nil })},
		"disagrees": {check: checkFunc(func([]string) error { return errMismatch }), reason: verify.ReasonPodResources},
		"hangs": {check: checkFunc(func([]string) error { time.Sleep(3 * time.Second); return nil }),
			reason: verify.ReasonPodResources},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			nd, v := newVerifier(t, 8, false, func(c *verify.Config) { c.Check = tc.check; c.CheckTimeout = 50 * time.Millisecond })
			start := time.Now()
			_, alloc, err := v.Decide(context.Background(), pod("x", nil), ctr("x", seal(t, nd.Key, "lpu1")))
			if d := time.Since(start); d > time.Second {
				t.Fatalf("Decide took %v, want the check bounded by its timeout", d)
			}
			var r *verify.Refusal
			switch {
			case tc.reason == "" && (err != nil || !slices.Equal(alloc.IDs, []string{"lpu1"})):
				t.Fatalf("Decide = %v, %v; want lpu1", alloc.IDs, err)
			case tc.reason != "" && (!errors.Is(err, verify.ErrPodResources) || !errors.As(err, &r) || r.Reason != tc.reason):
				t.Fatalf("Decide error = %v, want refusal %q", err, tc.reason)
			}
		})
	}
}

// TestCrossCheckTimeoutCapped: the runtime gives a plugin 2s per request,
// so the cross-check's bound defaults to and is capped at
// MaxCrossCheckTimeout.
func TestCrossCheckTimeoutCapped(t *testing.T) {
	for in, want := range map[time.Duration]time.Duration{
		0:                      verify.MaxCrossCheckTimeout,
		200 * time.Millisecond: 200 * time.Millisecond,
		10 * time.Second:       verify.MaxCrossCheckTimeout,
	} {
		if _, v := newVerifier(t, 1, false, func(c *verify.Config) { c.CheckTimeout = in }); v.CheckTimeout() != want {
			t.Errorf("CheckTimeout %v: effective %v, want %v", in, v.CheckTimeout(), want)
		}
	}
}

// checkFunc is a verify.CrossChecker honouring ctx.
type checkFunc func(ids []string) error

func (c checkFunc) Check(ctx context.Context, _, _, _ string, ids []string) error {
	done := make(chan error, 1)
	go func() { done <- c(ids) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func TestAllocationID(t *testing.T) {
	nd, v := newVerifier(t, 8, false)
	id := inject.NewAllocationID()
	withID, err := nd.Key.AnnotationsWithID([]string{"lpu2", "lpu3"}, id)
	if err != nil {
		t.Fatal(err)
	}
	swapped := maps.Clone(withID)
	swapped[inject.AnnotationAllocation] = inject.NewAllocationID() // seal bound to the other ID
	idOnly := map[string]string{inject.AnnotationAllocation: id, inject.AnnotationAllocationSeal: withID[inject.AnnotationAllocationSeal]}
	tests := map[string]struct {
		ann    map[string]string
		wantID string
		reason string
	}{
		"sealed with allocation ID":     {ann: withID, wantID: id},
		"allocation ID swapped":         {ann: swapped, reason: verify.ReasonBadSeal},
		"allocation ID without devices": {ann: idOnly, reason: verify.ReasonBadSeal},
		"legacy annotations, no ID":     {ann: nd.Legacy.AnnotationsV1([]string{"lpu2"}), reason: verify.ReasonBadSeal},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, alloc, err := v.Decide(context.Background(), pod("a", nil), ctr("a", tc.ann))
			var r *verify.Refusal
			switch {
			case tc.reason != "" && (!errors.As(err, &r) || r.Reason != tc.reason):
				t.Fatalf("Decide = %v, want refusal %q", err, tc.reason)
			case tc.reason == "" && (err != nil || alloc.ID != tc.wantID || len(alloc.IDs) == 0):
				t.Fatalf("Decide = %+v, %v; want allocation ID %q", alloc, err, tc.wantID)
			}
		})
	}
}

func TestInventoryChangesAreSeen(t *testing.T) {
	nd, v := newVerifier(t, 4, false)
	ann := seal(t, nd.Key, "lpu4")
	if _, _, err := v.Decide(context.Background(), pod("x", nil), ctr("x", ann)); err == nil {
		t.Fatal("lpu4 accepted before it exists")
	}
	devicetest.AddDevice(t, nd.Root, devicetest.Row{Index: 4})
	if _, err := nd.Store.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, alloc, err := v.Decide(context.Background(), pod("x", nil), ctr("x", ann)); err != nil || !slices.Equal(alloc.IDs, []string{"lpu4"}) {
		t.Fatalf("after rescan: %v, %v", alloc.IDs, err)
	}
	devicetest.SetStatus(t, nd.Root, "lpu4", "FAILED")
	if _, err := nd.Store.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	var r *verify.Refusal
	if _, _, err := v.Decide(context.Background(), pod("x", nil), ctr("x", ann)); !errors.As(err, &r) || r.Reason != verify.ReasonUnhealthyDevice {
		t.Fatalf("after lpu4 failed: %v, want unhealthy refusal", err)
	}
}

// FuzzDecide feeds arbitrary pod and container annotations through the
// trust rules. Invariants: no panic; every error is a Refusal with a known
// reason; a reserved pod key always refuses; devices are granted only for a
// value carrying this key's seal, only inventory devices, with
// LPU_VISIBLE_DEVICES naming exactly them; otherwise the container gets no
// device and LPU_VISIBLE_DEVICES=none. Each container also carries an
// allocation ID with this key's allocation seal over devVal, so that a
// fuzzed value can reach a grant when sealVal is its devices seal.
func FuzzDecide(f *testing.F) {
	fx, v := newVerifier(f, 8, true)
	const allocID = "00112233445566778899aabbccddeeff"
	sealed := func(value string) map[string]string {
		ann, err := fx.Key.AnnotationsWithID([]string{value}, allocID)
		if err != nil {
			f.Fatal(err)
		}
		return ann
	}
	seal := func(value string) string { return sealed(value)[inject.AnnotationSeal] }
	f.Add("app", "x", "lpu0,lpu1", seal("lpu0,lpu1"), true, true)
	f.Add("lpu.hyperaccel.ai/devices", "lpu0", "lpu0", seal("lpu0"), true, true)
	f.Add("app", "x", "lpu0", "", true, false)
	f.Add("app", "x", "", seal(""), false, true)
	f.Add("app", "x", "../lpu0", seal("../lpu0"), true, true)
	f.Add("app", "x", "lpu1,lpu1", seal("lpu1,lpu1"), true, true)
	f.Add("app", "x", "lpu5", seal("lpu5"), true, true)
	f.Add("app", "x", "lpu9", seal("lpu9"), true, true)
	f.Add("LPU.HYPERACCEL.AI/devices", "lpu0", "lpu7,lpu0", seal("lpu7,lpu0"), true, true)
	f.Add("app", "x", "lpu0", "v2:"+strings.Repeat("0", 64), true, true)
	f.Add("app", "x", "lpu0,lpu1", fx.Legacy.SealV1("lpu0,lpu1"), true, true)
	reasons := map[string]bool{}
	for _, r := range verify.Reasons {
		reasons[r] = true
	}
	f.Fuzz(func(t *testing.T, podKey, podVal, devVal, sealVal string, hasDev, hasSeal bool) {
		ann := map[string]string{}
		if hasDev {
			ann[inject.AnnotationDevices] = devVal
			ann[inject.AnnotationAllocation] = allocID
			ann[inject.AnnotationAllocationSeal] = sealed(devVal)[inject.AnnotationAllocationSeal]
		}
		if hasSeal {
			ann[inject.AnnotationSeal] = sealVal
		}
		adj, alloc, err := v.Decide(context.Background(), pod("f", map[string]string{podKey: podVal}), ctr("f", ann))
		ids := alloc.IDs
		reserved := len(podKey) >= len(inject.AnnotationPrefix) && strings.EqualFold(podKey[:len(inject.AnnotationPrefix)], inject.AnnotationPrefix)
		if err != nil {
			var r *verify.Refusal
			if !errors.As(err, &r) || !reasons[r.Reason] {
				t.Fatalf("error %v is not a Refusal with a known reason", err)
			}
			if reserved && r.Reason != verify.ReasonPodAnnotation {
				t.Fatalf("reserved pod key %q refused for %q", podKey, r.Reason)
			}
			return
		}
		if reserved {
			t.Fatalf("reserved pod key %q accepted", podKey)
		}
		var vis []string
		for _, e := range adj.GetEnv() {
			if e.GetKey() == inject.EnvVisibleDevices {
				vis = append(vis, e.GetValue())
			}
		}
		if len(vis) != 1 {
			t.Fatalf("LPU_VISIBLE_DEVICES set %d times: %v", len(vis), vis)
		}
		devs := adj.GetLinux().GetDevices()
		if len(ids) == 0 {
			if hasDev || hasSeal {
				t.Fatalf("annotations %v accepted without devices", ann)
			}
			if len(devs) != 0 || vis[0] != inject.VisibleNone || len(adj.GetMounts()) != 0 {
				t.Fatalf("unallocated container got devices %v, env %v, mounts %v", devs, vis, adj.GetMounts())
			}
			return
		}
		if !hasDev || !hasSeal || sealVal != seal(devVal) || devVal != inject.EncodeIDs(ids) {
			t.Fatalf("granted %v for annotations %v not sealed by our key", ids, ann)
		}
		snap := fx.Store.Load()
		var idx []string
		for i, id := range ids {
			d, ok := snap.Device(id)
			if !ok || !d.Health.Healthy {
				t.Fatalf("granted %s: unknown or unhealthy", id)
			}
			if devs[i].GetPath() != d.Path || devs[i].GetMajor() != d.Major || devs[i].GetMinor() != d.Minor {
				t.Fatalf("node %v does not match discovery %+v", devs[i], d)
			}
			n, _ := device.ParseID(id)
			idx = append(idx, strconv.Itoa(n))
		}
		if len(devs) != len(ids) || vis[0] != strings.Join(idx, ",") {
			t.Fatalf("devices %v / env %q do not match ids %v", devs, vis[0], ids)
		}
	})
}

// BenchmarkDecideValid4 is the decision alone: no metrics, no log record
// (the adapter's BenchmarkCreateContainerValid4 adds them).
func BenchmarkDecideValid4(b *testing.B) {
	nd, v := newVerifier(b, 8, false)
	p, c := pod("b", nil), ctr("b", seal(b, nd.Key, "lpu6", "lpu7", "lpu0", "lpu1"))
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := v.Decide(ctx, p, c); err != nil {
			b.Fatal(err)
		}
	}
}

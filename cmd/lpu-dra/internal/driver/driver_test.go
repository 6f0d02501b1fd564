package driver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/hyperaccel/lpu-node/cmd/lpu-dra/internal/state"
	checkpoint "github.com/hyperaccel/lpu-node/internal/dracheckpoint"
	"github.com/hyperaccel/lpu-node/internal/health/healthtest"
	"github.com/hyperaccel/lpu-node/pkg/device"
)

func TestPrepareArc(t *testing.T) {
	e := newEnv(t, healthtest.New(t, healthtest.Ring(8)))
	res := e.prepare(claim("u1", arc(6, 4)))
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	want := kubeletplugin.Device{Requests: []string{"lpus"}, PoolName: node, DeviceName: "ring0-start6-size4",
		CDIDeviceIDs: []string{"lpu.hyperaccel.ai/claim=u1"}}
	if len(res.Devices) != 1 || !equalDevice(res.Devices[0], want) {
		t.Fatalf("devices %+v, want %+v", res.Devices, want)
	}
	nodes, env, mounts := e.injected("u1")
	if !slices.Equal(nodes, []string{"/dev/lpu6", "/dev/lpu7", "/dev/lpu0", "/dev/lpu1"}) {
		t.Fatalf("device nodes %v, want ring order from lpu6", nodes)
	}
	if !slices.Contains(env, "LPU_VISIBLE_DEVICES=6,7,0,1") || !slices.Contains(env, "LPU_DRIVER_VERSION=1.4.2") {
		t.Fatalf("env %v", env)
	}
	if len(mounts) != 1 || !strings.HasPrefix(mounts[0], "/usr/lib/lpu:ro,") {
		t.Fatalf("mounts %v, want the driver mount read-only", mounts)
	}
	st, err := checkpoint.Load(e.stateDir)
	if err != nil || !slices.Equal(st.Claims["u1"].LPUs, []string{"lpu6", "lpu7", "lpu0", "lpu1"}) {
		t.Fatalf("checkpoint %+v, %v", st, err)
	}
}

func equalDevice(a, b kubeletplugin.Device) bool {
	return slices.Equal(a.Requests, b.Requests) && a.PoolName == b.PoolName && a.DeviceName == b.DeviceName && slices.Equal(a.CDIDeviceIDs, b.CDIDeviceIDs)
}

func TestPrepareSinglesRingOrder(t *testing.T) {
	e := newEnv(t, healthtest.New(t, healthtest.Ring(8)))
	c := claim("u1", alloced{pool: node, device: "ring0-start7-size1", request: "lpus/singles"},
		alloced{pool: node, device: "ring0-start3-size1", request: "lpus/singles"},
		alloced{pool: node, device: "ring0-start0-size1", request: "lpus/singles"},
		alloced{pool: "gpu", device: "gpu-0", request: "gpu"})
	res := e.prepare(c)
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	if len(res.Devices) != 3 {
		t.Fatalf("devices %+v: the foreign driver's device must be left out", res.Devices)
	}
	cdiIDs := 0
	for _, d := range res.Devices {
		cdiIDs += len(d.CDIDeviceIDs)
	}
	if cdiIDs != 1 {
		t.Fatalf("the claim's CDI device is returned %d times, want once", cdiIDs)
	}
	_, env, _ := e.injected("u1")
	// {7,0,3}: the largest gap is 3→7, so ring order starts at 7.
	if !slices.Contains(env, "LPU_VISIBLE_DEVICES=7,0,3") {
		t.Fatalf("env %v, want all three LPUs in ring order", env)
	}
}

func TestPrepareIdempotent(t *testing.T) {
	e := newEnv(t, healthtest.New(t, healthtest.Ring(8)))
	first := e.prepare(claim("u1", arc(0, 4)))
	spec := filepath.Join(e.cdiDir, state.SpecFile("u1"))
	before, err := os.Stat(spec)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		again := e.prepare(claim("u1", arc(0, 4)))
		if again.Err != nil || len(again.Devices) != 1 || !equalDevice(again.Devices[0], first.Devices[0]) {
			t.Fatalf("repeat %d: %+v, first %+v", i, again, first)
		}
	}
	after, _ := os.Stat(spec)
	if !after.ModTime().Equal(before.ModTime()) {
		t.Fatal("a repeated Prepare rewrote the spec")
	}
	// Also after a restart.
	e.restart()
	if again := e.prepare(claim("u1", arc(0, 4))); again.Err != nil || !equalDevice(again.Devices[0], first.Devices[0]) {
		t.Fatalf("after restart: %+v", again)
	}
}

func TestPrepareRefusals(t *testing.T) {
	sick := healthtest.Ring(8)
	sick.Devices[5].Health = device.Health{Reason: `status "ECC_ERROR"`}
	tests := map[string]struct {
		inv    *device.Inventory
		held   *resourceapi.ResourceClaim // prepared first
		claim  *resourceapi.ResourceClaim
		want   string
		reason string
	}{
		"foreign pool":     {claim: claim("u1", alloced{pool: "node-b", device: "ring0-start0-size1"}), want: `device ring0-start0-size1 is in pool "node-b", this node's pool is "node-a"`, reason: state.ReasonForeignPool},
		"bad device name":  {claim: claim("u1", alloced{pool: node, device: "lpu3"}), want: `device name "lpu3": want ring<R>-start<S>-size<K>`, reason: state.ReasonBadDevice},
		"no such ring":     {claim: claim("u1", alloced{pool: node, device: "ring1-start0-size1"}), want: "device ring1-start0-size1 is not an arc of this node", reason: state.ReasonBadDevice},
		"arc too long":     {claim: claim("u1", alloced{pool: node, device: "ring0-start0-size9"}), want: "is not an arc of this node", reason: state.ReasonBadDevice},
		"full ring moved":  {claim: claim("u1", alloced{pool: node, device: "ring0-start3-size8"}), want: "is not an arc of this node", reason: state.ReasonBadDevice},
		"unhealthy":        {inv: sick, claim: claim("u1", arc(4, 2)), want: `device ring0-start4-size2: LPU lpu5 is unhealthy: status "ECC_ERROR"`, reason: state.ReasonUnhealthy},
		"held":             {held: claim("u0", arc(0, 4)), claim: claim("u1", arc(2, 4)), want: "device ring0-start2-size4: LPU lpu2 is held by claim default/claim-u0 (u0)", reason: state.ReasonHeld},
		"overlap in claim": {claim: claim("u1", arc(0, 2), arc(1, 2)), want: "devices of the claim overlap on lpu1", reason: state.ReasonBadDevice},
		"changed":          {held: claim("u1", arc(0, 2)), claim: claim("u1", arc(4, 2)), want: "already prepared with devices [lpus:ring0-start0-size2], now asked for [lpus:ring0-start4-size2]", reason: state.ReasonChanged},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			inv := tc.inv
			if inv == nil {
				inv = healthtest.Ring(8)
			}
			e := newEnv(t, healthtest.New(t, inv))
			if tc.held != nil {
				if r := e.prepare(tc.held); r.Err != nil {
					t.Fatal(r.Err)
				}
			}
			before := e.d.Prepared()
			r := e.prepare(tc.claim)
			if r.Err == nil || !strings.Contains(r.Err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", r.Err, tc.want)
			}
			if !strings.Contains(r.Err.Error(), "claim default/"+tc.claim.Name) {
				t.Fatalf("err %q does not name the claim", r.Err)
			}
			if got := e.d.Prepared(); len(got) != len(before) {
				t.Fatalf("a refused claim changed the prepared set: %v", got)
			}
			if tc.held == nil {
				if entries, _ := os.ReadDir(e.cdiDir); len(entries) != 0 {
					t.Fatalf("refused claim left %d files in the cdi dir", len(entries))
				}
			}
			if got := counter(t, e.metrics, MetricRefusals, tc.reason); got != 1 {
				t.Fatalf("refusals{reason=%s} = %v, want 1", tc.reason, got)
			}
		})
	}
}

func TestPrepareUnwritableCDIDir(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root writes into a read-only dir")
	}
	e := newEnv(t, healthtest.New(t, healthtest.Ring(8)))
	if err := os.Chmod(e.cdiDir, 0o500); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = os.Chmod(e.cdiDir, 0o755) }()
	r := e.prepare(claim("u1", arc(0, 4)))
	if r.Err == nil || !strings.Contains(r.Err.Error(), "write cdi spec "+filepath.Join(e.cdiDir, state.SpecFile("u1"))) {
		t.Fatalf("err = %v", r.Err)
	}
	if st, _ := checkpoint.Load(e.stateDir); len(st.Claims) != 0 {
		t.Fatalf("checkpoint holds a claim whose spec failed: %v", st.Claims)
	}
}

func TestPrepareUnwritableStateDir(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root writes into a read-only dir")
	}
	e := newEnv(t, healthtest.New(t, healthtest.Ring(8)))
	if err := os.Chmod(e.stateDir, 0o500); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = os.Chmod(e.stateDir, 0o700) }()
	r := e.prepare(claim("u1", arc(0, 4)))
	if r.Err == nil || !strings.Contains(r.Err.Error(), "checkpoint") {
		t.Fatalf("err = %v", r.Err)
	}
	if entries, _ := os.ReadDir(e.cdiDir); len(entries) != 0 {
		t.Fatalf("the spec of a claim whose checkpoint failed is still there: %v", entries)
	}
}

func TestUnprepare(t *testing.T) {
	e := newEnv(t, healthtest.New(t, healthtest.Ring(8)))
	e.prepare(claim("u1", arc(0, 4)))
	if err := e.unprepare("u1"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(e.cdiDir, state.SpecFile("u1"))); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("spec still there: %v", err)
	}
	if st, _ := checkpoint.Load(e.stateDir); len(st.Claims) != 0 {
		t.Fatalf("checkpoint still holds %v", st.Claims)
	}
	if err := e.unprepare("u1"); err != nil {
		t.Fatalf("second unprepare: %v", err)
	}
	if err := e.unprepare("never-seen"); err != nil {
		t.Fatalf("unknown claim: %v", err)
	}
	// The LPUs are free again.
	if r := e.prepare(claim("u2", arc(2, 4))); r.Err != nil {
		t.Fatal(r.Err)
	}
}

func TestRestartKeepsClaims(t *testing.T) {
	st := healthtest.New(t, healthtest.Ring(8))
	e := newEnv(t, st)
	e.prepare(claim("u1", arc(0, 4)))
	e.prepare(claim("u2", arc(4, 2)))
	// A crash lost u2's spec (spec removed, entry kept) and left an orphan
	// spec of a claim whose checkpoint save never happened.
	os.Remove(filepath.Join(e.cdiDir, state.SpecFile("u2")))
	orphan := filepath.Join(e.cdiDir, state.SpecFile("u9"))
	if err := os.WriteFile(orphan, []byte(`{}`), 0o644); err != nil {
		t.Fatal(err)
	}
	e.restart()
	if got := e.d.Prepared(); len(got) != 2 {
		t.Fatalf("after restart %d claims prepared, want 2", len(got))
	}
	if nodes, _, _ := e.injected("u2"); !slices.Equal(nodes, []string{"/dev/lpu4", "/dev/lpu5"}) {
		t.Fatalf("restored spec nodes %v", nodes)
	}
	if _, err := os.Stat(orphan); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("orphan claim spec not removed")
	}
	// The new process unprepares what the old one prepared, and still
	// refuses overlaps with it.
	if r := e.prepare(claim("u3", arc(3, 2))); r.Err == nil {
		t.Fatal("u3 overlaps u1 after a restart but was prepared")
	}
	if err := e.unprepare("u1"); err != nil {
		t.Fatal(err)
	}
	// A stale checkpoint naming LPUs that vanished still loads, and the
	// claim can be unprepared.
	small := healthtest.Ring(8)
	small.Devices = small.Devices[:4]
	small.Rings = [][]string{{"lpu0", "lpu1", "lpu2", "lpu3"}}
	st2 := healthtest.New(t, small)
	e.devices = st2
	os.Remove(filepath.Join(e.cdiDir, state.SpecFile("u2")))
	e.restart()
	if _, err := os.Stat(filepath.Join(e.cdiDir, state.SpecFile("u2"))); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("a spec naming vanished LPUs was restored")
	}
	if err := e.unprepare("u2"); err != nil {
		t.Fatal(err)
	}
}

func TestCorruptCheckpointRefusesStart(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, checkpoint.FileName), []byte(`{"version":"v9"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := New(healthtest.New(t, healthtest.Ring(8)), Options{NodeName: node, StateDir: dir, CDIDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), checkpoint.FileName) || !strings.Contains(err.Error(), `version "v9"`) {
		t.Fatalf("err = %v, want one naming the checkpoint and its version", err)
	}
}

func TestConcurrentPrepareUnprepare(t *testing.T) {
	e := newEnv(t, healthtest.New(t, healthtest.Ring(8)))
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				uid := fmt.Sprintf("w%d-%d", w, i)
				// Every worker competes for the same two LPUs and its own.
				for _, r := range []alloced{arc(w, 1), arc(0, 2)} {
					res, err := e.d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{claim(uid, r)})
					if err != nil {
						t.Error(err)
						return
					}
					if res[types.UID(uid)].Err == nil {
						break
					}
				}
				_, _ = e.d.Resources()
				if i%2 == 0 {
					_, _ = e.d.UnprepareResourceClaims(context.Background(), []kubeletplugin.NamespacedObject{{UID: types.UID(uid)}})
				}
			}
		}(w)
	}
	wg.Wait()
	// No LPU is held twice, and the checkpoint matches memory.
	seen := map[string]string{}
	for uid, c := range e.d.Prepared() {
		for _, id := range c.LPUs {
			if other, ok := seen[id]; ok {
				t.Fatalf("%s held by %s and %s", id, other, uid)
			}
			seen[id] = uid
		}
	}
	st, err := checkpoint.Load(e.stateDir)
	if err != nil || len(st.Claims) != len(e.d.Prepared()) {
		t.Fatalf("checkpoint has %d claims, memory %d (%v)", len(st.Claims), len(e.d.Prepared()), err)
	}
}

// counter reads one metric value; reason "" means the unlabelled series.
func counter(t testing.TB, m *Metrics, name, reason string) float64 {
	t.Helper()
	return labelled(t, m, name, "reason", reason)
}

// labelled reads the value of the series of name whose label key is
// value; value "" means the first series.
func labelled(t testing.TB, m *Metrics, name, key, value string) float64 {
	t.Helper()
	fams, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, s := range f.GetMetric() {
			match := value == ""
			for _, l := range s.GetLabel() {
				if l.GetName() == key && l.GetValue() == value {
					match = true
				}
			}
			if match {
				if s.GetCounter() != nil {
					return s.GetCounter().GetValue()
				}
				return s.GetGauge().GetValue()
			}
		}
	}
	return 0
}

func BenchmarkPrepare4Arc(b *testing.B) {
	e := newEnv(b, healthtest.New(b, healthtest.Ring(8)))
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		uid := fmt.Sprintf("u%d", i)
		i++
		res, _ := e.d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{claim(uid, arc(0, 4))})
		if res[types.UID(uid)].Err != nil {
			b.Fatal(res[types.UID(uid)].Err)
		}
		b.StopTimer()
		_, _ = e.d.UnprepareResourceClaims(context.Background(), []kubeletplugin.NamespacedObject{{UID: types.UID(uid)}})
		b.StartTimer()
	}
}

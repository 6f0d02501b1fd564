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
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/hyperaccel/lpu-node/internal/daemontest"
	checkpoint "github.com/hyperaccel/lpu-node/internal/dracheckpoint"
	"github.com/hyperaccel/lpu-node/internal/health"
	"github.com/hyperaccel/lpu-node/pkg/alloc"
	"github.com/hyperaccel/lpu-node/pkg/arcslice"
	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/device/devicetest"
	"github.com/hyperaccel/lpu-node/pkg/inject"
)

const node = "node-a"

// static is a fixed device state, for tests that do not exercise health.
type static struct {
	mu   sync.Mutex
	snap health.Snapshot
	ch   chan struct{}
}

func newStatic(t testing.TB, inv *device.Inventory) *static {
	l, err := alloc.NewLayout(inv.Rings)
	if err != nil {
		t.Fatal(err)
	}
	return &static{snap: health.Snapshot{Inventory: inv, Layout: l, Generation: 1}, ch: make(chan struct{})}
}

func (s *static) Snapshot() (health.Snapshot, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snap, s.ch
}

func ring8() *device.Inventory {
	inv := &device.Inventory{DriverVersion: "1.4.2"}
	var ring []string
	for i := 0; i < 8; i++ {
		inv.Devices = append(inv.Devices, device.Device{ID: device.ID(i), Index: i, Path: fmt.Sprintf("/dev/lpu%d", i),
			Major: 240, Minor: int64(i), Model: "LPU-X1", Firmware: "2.0.1", NUMANode: 0, Health: device.Health{Healthy: true}})
		ring = append(ring, device.ID(i))
	}
	inv.Rings = [][]string{ring}
	return inv
}

type env struct {
	t        testing.TB
	stateDir string
	cdiDir   string
	devices  Devices
	d        *Driver
	metrics  *Metrics
	arcSizes []int
	classes  []string    // the driver's Options.DeviceClasses
	labels   LabelSetter // the driver's Options.NodeLabels
}

func newEnv(t testing.TB, devices Devices) *env {
	e := &env{t: t, stateDir: t.TempDir(), cdiDir: filepath.Join(t.TempDir(), "cdi"), devices: devices}
	e.restart()
	return e
}

// restart builds a new driver on the same directories, as a new process.
func (e *env) restart() {
	e.t.Helper()
	e.metrics = NewMetrics(node)
	d, err := New(e.devices, Options{NodeName: node, StateDir: e.stateDir, CDIDir: e.cdiDir,
		Inject: inject.Options{Mounts: []inject.Mount{{HostPath: "/usr/lib/lpu"}}}, ArcSizes: e.arcSizes, DeviceClasses: e.classes, Metrics: e.metrics, NodeLabels: e.labels})
	if err != nil {
		e.t.Fatal(err)
	}
	d.Heal()
	e.d = d
}

type alloced struct {
	pool, device, request string
}

func claim(uid string, results ...alloced) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "claim-" + uid, Namespace: "default", UID: types.UID(uid)},
		Status: resourceapi.ResourceClaimStatus{
			Allocation:  &resourceapi.AllocationResult{},
			ReservedFor: []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "pod-" + uid, UID: types.UID("pod-uid-" + uid)}},
		},
	}
	for _, r := range results {
		driver := inject.Driver
		if r.pool == "gpu" {
			driver = "gpu.example.com"
		}
		req := r.request
		if req == "" {
			req = "lpus"
		}
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results,
			resourceapi.DeviceRequestAllocationResult{Request: req, Driver: driver, Pool: r.pool, Device: r.device})
	}
	return c
}

func arc(start, size int) alloced {
	return alloced{pool: node, device: arcslice.DeviceName(alloc.Arc{Ring: 0, Start: start, Size: size})}
}

func (e *env) prepare(c *resourceapi.ResourceClaim) kubeletplugin.PrepareResult {
	e.t.Helper()
	res, err := e.d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{c})
	if err != nil {
		e.t.Fatal(err)
	}
	r, ok := res[c.UID]
	if !ok || len(res) != 1 {
		e.t.Fatalf("result %v has no entry for %s", res, c.UID)
	}
	return r
}

func (e *env) unprepare(uid string) error {
	e.t.Helper()
	res, err := e.d.UnprepareResourceClaims(context.Background(), []kubeletplugin.NamespacedObject{
		{NamespacedName: types.NamespacedName{Namespace: "default", Name: "claim-" + uid}, UID: types.UID(uid)}})
	if err != nil {
		e.t.Fatal(err)
	}
	return res[types.UID(uid)]
}

// injected resolves a claim's CDI device through the CDI library from the
// spec dir and returns the container edits it applies.
func (e *env) injected(uid string) (nodes, env, mounts []string) {
	e.t.Helper()
	cache, err := cdi.NewCache(cdi.WithSpecDirs(e.cdiDir), cdi.WithAutoRefresh(false))
	if err != nil {
		e.t.Fatal(err)
	}
	dev := cache.GetDevice(inject.ClaimDeviceID(uid))
	if dev == nil {
		e.t.Fatalf("CDI device %s not resolvable: %v", inject.ClaimDeviceID(uid), cache.GetErrors())
	}
	for _, n := range dev.ContainerEdits.DeviceNodes {
		nodes = append(nodes, n.Path)
	}
	for _, m := range dev.ContainerEdits.Mounts {
		mounts = append(mounts, m.HostPath+":"+strings.Join(m.Options, ","))
	}
	return nodes, dev.ContainerEdits.Env, mounts
}

func TestPrepareArc(t *testing.T) {
	e := newEnv(t, newStatic(t, ring8()))
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
	e := newEnv(t, newStatic(t, ring8()))
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
	e := newEnv(t, newStatic(t, ring8()))
	first := e.prepare(claim("u1", arc(0, 4)))
	spec := filepath.Join(e.cdiDir, specFile("u1"))
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
	sick := ring8()
	sick.Devices[5].Health = device.Health{Reason: `status "ECC_ERROR"`}
	tests := map[string]struct {
		inv    *device.Inventory
		held   *resourceapi.ResourceClaim // prepared first
		claim  *resourceapi.ResourceClaim
		want   string
		reason string
	}{
		"foreign pool":     {claim: claim("u1", alloced{pool: "node-b", device: "ring0-start0-size1"}), want: `device ring0-start0-size1 is in pool "node-b", this node's pool is "node-a"`, reason: ReasonForeignPool},
		"bad device name":  {claim: claim("u1", alloced{pool: node, device: "lpu3"}), want: `device name "lpu3": want ring<R>-start<S>-size<K>`, reason: ReasonBadDevice},
		"no such ring":     {claim: claim("u1", alloced{pool: node, device: "ring1-start0-size1"}), want: "device ring1-start0-size1 is not an arc of this node", reason: ReasonBadDevice},
		"arc too long":     {claim: claim("u1", alloced{pool: node, device: "ring0-start0-size9"}), want: "is not an arc of this node", reason: ReasonBadDevice},
		"full ring moved":  {claim: claim("u1", alloced{pool: node, device: "ring0-start3-size8"}), want: "is not an arc of this node", reason: ReasonBadDevice},
		"unhealthy":        {inv: sick, claim: claim("u1", arc(4, 2)), want: `device ring0-start4-size2: LPU lpu5 is unhealthy: status "ECC_ERROR"`, reason: ReasonUnhealthy},
		"held":             {held: claim("u0", arc(0, 4)), claim: claim("u1", arc(2, 4)), want: "device ring0-start2-size4: LPU lpu2 is held by claim default/claim-u0 (u0)", reason: ReasonHeld},
		"overlap in claim": {claim: claim("u1", arc(0, 2), arc(1, 2)), want: "devices of the claim overlap on lpu1", reason: ReasonBadDevice},
		"changed":          {held: claim("u1", arc(0, 2)), claim: claim("u1", arc(4, 2)), want: "already prepared with devices [lpus:ring0-start0-size2], now asked for [lpus:ring0-start4-size2]", reason: ReasonChanged},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			inv := tc.inv
			if inv == nil {
				inv = ring8()
			}
			e := newEnv(t, newStatic(t, inv))
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
	e := newEnv(t, newStatic(t, ring8()))
	if err := os.Chmod(e.cdiDir, 0o500); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = os.Chmod(e.cdiDir, 0o755) }()
	r := e.prepare(claim("u1", arc(0, 4)))
	if r.Err == nil || !strings.Contains(r.Err.Error(), "write cdi spec "+filepath.Join(e.cdiDir, specFile("u1"))) {
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
	e := newEnv(t, newStatic(t, ring8()))
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
	e := newEnv(t, newStatic(t, ring8()))
	e.prepare(claim("u1", arc(0, 4)))
	if err := e.unprepare("u1"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(e.cdiDir, specFile("u1"))); !errors.Is(err, os.ErrNotExist) {
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
	st := newStatic(t, ring8())
	e := newEnv(t, st)
	e.prepare(claim("u1", arc(0, 4)))
	e.prepare(claim("u2", arc(4, 2)))
	// A crash lost u2's spec (spec removed, entry kept) and left an orphan
	// spec of a claim whose checkpoint save never happened.
	os.Remove(filepath.Join(e.cdiDir, specFile("u2")))
	orphan := filepath.Join(e.cdiDir, specFile("u9"))
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
	small := ring8()
	small.Devices = small.Devices[:4]
	small.Rings = [][]string{{"lpu0", "lpu1", "lpu2", "lpu3"}}
	st2 := newStatic(t, small)
	e.devices = st2
	os.Remove(filepath.Join(e.cdiDir, specFile("u2")))
	e.restart()
	if _, err := os.Stat(filepath.Join(e.cdiDir, specFile("u2"))); !errors.Is(err, os.ErrNotExist) {
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
	_, err := New(newStatic(t, ring8()), Options{NodeName: node, StateDir: dir, CDIDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), checkpoint.FileName) || !strings.Contains(err.Error(), `version "v9"`) {
		t.Fatalf("err = %v, want one naming the checkpoint and its version", err)
	}
}

func TestConcurrentPrepareUnprepare(t *testing.T) {
	e := newEnv(t, newStatic(t, ring8()))
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

// recorder is a Publisher that keeps what it was given.
type recorder struct {
	mu   sync.Mutex
	last resourceslice.DriverResources
	n    int
	ch   chan struct{}
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

func newRecorder() *recorder { return &recorder{ch: make(chan struct{}, 100)} }

func (r *recorder) PublishResources(_ context.Context, res resourceslice.DriverResources) error {
	r.mu.Lock()
	r.last, r.n = res, r.n+1
	r.mu.Unlock()
	r.ch <- struct{}{}
	return nil
}

// first returns the first device of the given size in the last
// publication, and the taints by device name.
func (r *recorder) first(size int) (string, map[string][]resourceapi.DeviceTaint) {
	r.mu.Lock()
	defer r.mu.Unlock()
	taints := map[string][]resourceapi.DeviceTaint{}
	first := ""
	for _, s := range r.last.Pools[node].Slices {
		for _, d := range s.Devices {
			if len(d.Taints) > 0 {
				taints[d.Name] = d.Taints
			}
			if a, _ := arcslice.ParseDeviceName(d.Name); a.Size == size && first == "" {
				first = d.Name
			}
		}
	}
	return first, taints
}

func (r *recorder) wait(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.After(time.Second)
	for !cond() {
		select {
		case <-r.ch:
		case <-deadline:
			t.Fatal("condition not met within 1 s")
		}
	}
}

func TestRepublishFollowsPrepared(t *testing.T) {
	e := newEnv(t, newStatic(t, ring8()))
	rec := newRecorder()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = e.d.RunPublisher(ctx, rec) }()
	defer func() { cancel(); <-done }()
	rec.wait(t, func() bool { f, _ := rec.first(4); return f == "ring0-start0-size4" })
	e.prepare(claim("u1", arc(0, 4)))
	rec.wait(t, func() bool { f, _ := rec.first(4); return f == "ring0-start4-size4" })
	if err := e.unprepare("u1"); err != nil {
		t.Fatal(err)
	}
	rec.wait(t, func() bool { f, _ := rec.first(4); return f == "ring0-start0-size4" })
	// The publisher counts a publication after the recorder has seen it.
	daemontest.Eventually(t, 5*time.Second, "3 republishes counted", func() bool {
		return counter(t, e.metrics, MetricRepublishes, "") >= 3
	})
}

func TestRunPublisherRefusesAnUnpublishableNode(t *testing.T) {
	inv := &device.Inventory{}
	var ring []string
	for i := 0; i < 33; i++ {
		inv.Devices = append(inv.Devices, device.Device{ID: device.ID(i), Index: i, Health: device.Health{Healthy: true}})
		ring = append(ring, device.ID(i))
	}
	inv.Rings = [][]string{ring}
	e := newEnv(t, newStatic(t, inv))
	rec := newRecorder()
	err := e.d.RunPublisher(context.Background(), rec)
	if err == nil || !strings.Contains(err.Error(), "node node-a: ring 0 (lpu0…lpu32) has 33 LPUs") {
		t.Fatalf("err = %v", err)
	}
	if rec.count() != 0 {
		t.Fatal("something was published")
	}
}

// The real health monitor over a fake sysfs tree: an LPU failing taints
// its arcs within 1 s, recovery lifts the taints, and WatchHealthStatus
// reports the arcs.
func TestHealthTaintsArcs(t *testing.T) {
	var rows []devicetest.Row
	for i := 0; i < 8; i++ {
		rows = append(rows, devicetest.Row{Index: i})
	}
	root := devicetest.NewTree(t, rows...)
	mon := health.New(device.NewSysfs(root), health.Options{PollInterval: 50 * time.Millisecond, ProbeInterval: 20 * time.Millisecond,
		ResyncInterval: time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = mon.Run(ctx) }()
	defer func() { cancel(); wg.Wait() }()
	<-mon.Ready()
	e := newEnv(t, mon)
	rec := newRecorder()
	wg.Add(1)
	go func() { defer wg.Done(); _ = e.d.RunPublisher(ctx, rec) }()
	reports := make(chan kubeletplugin.DeviceHealthReport, 10)
	wg.Add(1)
	go func() { defer wg.Done(); _ = e.d.WatchHealthStatus(ctx, reports) }()
	if r := <-reports; len(r.Devices) != 57 || r.Devices[0].Health != kubeletplugin.HealthStatusHealthy {
		t.Fatalf("first health report: %d devices, %+v", len(r.Devices), r.Devices[0])
	}
	rec.wait(t, func() bool { _, taints := rec.first(1); return rec.count() > 0 && len(taints) == 0 })

	start := time.Now()
	devicetest.SetStatus(t, root, "lpu3", "ECC_ERROR")
	rec.wait(t, func() bool { _, taints := rec.first(1); return len(taints) == 29 })
	t.Logf("arcs tainted %v after the failure", time.Since(start))
	_, taints := rec.first(1)
	if tt := taints["ring0-start3-size1"]; len(tt) != 1 || tt[0].Key != arcslice.TaintKey || tt[0].Value != "lpu3" || tt[0].Effect != resourceapi.DeviceTaintEffectNoSchedule {
		t.Fatalf("taint of lpu3's single arc: %+v", tt)
	}
	if r := e.prepare(claim("u1", arc(3, 1))); r.Err == nil {
		t.Fatal("prepared an arc holding an unhealthy LPU")
	}
	for r := range reports {
		unhealthy := 0
		for _, d := range r.Devices {
			if d.Health == kubeletplugin.HealthStatusUnhealthy {
				unhealthy++
			}
		}
		if unhealthy == 29 {
			break
		}
	}
	devicetest.SetStatus(t, root, "lpu3", device.StatusReady)
	rec.wait(t, func() bool { _, taints := rec.first(1); return len(taints) == 0 })
}

// counter reads one metric value; label "" means the unlabelled series.
func counter(t testing.TB, m *Metrics, name, reason string) float64 {
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
			match := reason == ""
			for _, l := range s.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == reason {
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
	e := newEnv(b, newStatic(b, ring8()))
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

func TestNodeWithoutLPUsPublishesAnEmptyPool(t *testing.T) {
	e := newEnv(t, newStatic(t, &device.Inventory{}))
	res, err := e.d.Resources()
	if err != nil {
		t.Fatal(err)
	}
	if p := res.Pools[node]; len(p.Slices) != 1 || len(p.Slices[0].Devices) != 0 {
		t.Fatalf("pool %+v, want one empty slice", p)
	}
}

// With dra.arcSizes only those sizes are published, in the order the
// full set has them, and an arc of another size (allocated before the
// config changed) still prepares and stays published while prepared.
func TestArcSizesLimitPublishedDevices(t *testing.T) {
	published := func(e *env) []string {
		t.Helper()
		if r := e.prepare(claim("u1", arc(0, 2))); r.Err != nil {
			t.Fatal(r.Err)
		}
		res, err := e.d.Resources()
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, sl := range res.Pools[node].Slices {
			for _, d := range sl.Devices {
				names = append(names, d.Name)
			}
		}
		return names
	}
	some := newEnv(t, newStatic(t, ring8()))
	some.arcSizes = []int{1, 4}
	some.restart()
	got := published(some)
	var want []string
	for _, n := range published(newEnv(t, newStatic(t, ring8()))) {
		if strings.HasSuffix(n, "-size1") || strings.HasSuffix(n, "-size4") {
			want = append(want, n)
		}
	}
	// The allocated 2-arc stays published; the rest are the free arcs
	// (6 singles, 3 quads clear of lpu0 and lpu1) in full order.
	allocated := "ring0-start0-size2"
	if !slices.Contains(got, allocated) {
		t.Fatalf("published %v without the allocated %s", got, allocated)
	}
	got = slices.DeleteFunc(got, func(n string) bool { return n == allocated })
	if len(got) != 9 || !slices.Equal(got, want) {
		t.Fatalf("published %v,\nwant the 9 free arcs of sizes 1 and 4 in full order %v", got, want)
	}
}

// TestSaveFailureRemovesSpecUnderLock is F8 of the fourth round: when the
// checkpoint cannot be saved, Prepare removes the spec it wrote before it
// releases the checkpoint lock, so a surge instance that prepares the
// claim next cannot lose its fresh spec of the same name.
func TestSaveFailureRemovesSpecUnderLock(t *testing.T) {
	e := newEnv(t, newStatic(t, ring8()))
	saveState = func(string, *checkpoint.State) error { return errors.New("disk full") }
	var heldAtRemoval error
	removed := false
	specRemovedHook = func() {
		removed = true
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		l, err := checkpoint.Acquire(ctx, e.stateDir, "other-instance", "prepare")
		if err == nil {
			_, _ = l.Release()
			heldAtRemoval = errors.New("the checkpoint lock was free when the spec was removed")
		}
	}
	t.Cleanup(func() { saveState, specRemovedHook = checkpoint.Save, nil })
	r := e.prepare(claim("u1", arc(0, 4)))
	if r.Err == nil || !strings.Contains(r.Err.Error(), "disk full") {
		t.Fatalf("err = %v, want the save's error", r.Err)
	}
	if !removed {
		t.Fatal("the spec of the unsaved claim was not removed")
	}
	if heldAtRemoval != nil {
		t.Fatal(heldAtRemoval)
	}
	if entries, _ := os.ReadDir(e.cdiDir); len(entries) != 0 {
		t.Fatalf("the spec of a claim whose checkpoint failed is still there: %v", entries)
	}
}

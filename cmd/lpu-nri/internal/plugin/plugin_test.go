package plugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/inventory"
	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/ledger"
	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/metrics"
	"github.com/hyperaccel/lpu-node/internal/backoff"
	"github.com/hyperaccel/lpu-node/internal/nritest"
	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/device/devicesim"
	"github.com/hyperaccel/lpu-node/pkg/device/devicetest"
	"github.com/hyperaccel/lpu-node/pkg/inject"
	"github.com/hyperaccel/lpu-node/pkg/inject/injecttest"
	"github.com/hyperaccel/lpu-node/pkg/ready"
)

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// testNode is the node name the test keys are bound to.
const testNode = "node-1"

func testKey(t testing.TB, b byte) *inject.Key {
	t.Helper()
	k, err := inject.NewKey(slices.Repeat([]byte{b}, inject.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	if k, err = k.ForNode(testNode); err != nil {
		t.Fatal(err)
	}
	return k
}

// seal returns the four annotations the device plugin writes (v2 seals,
// a fresh allocation ID) for ids, joined as the devices value.
func seal(t testing.TB, k *inject.Key, ids ...string) map[string]string {
	t.Helper()
	ann, err := k.AnnotationsWithID(ids, inject.NewAllocationID())
	if err != nil {
		t.Fatal(err)
	}
	return ann
}

// fixture is a plugin over a fake tree of n devices, lpu5 unhealthy when
// sick is set.
type fixture struct {
	root   string
	key    *inject.Key
	legacy *injecttest.Key // key's secret, writing the v1 form
	store  *inventory.Store
	p      *Plugin
}

func newFixture(t testing.TB, n int, sick bool, opts ...func(*Config)) *fixture {
	t.Helper()
	rows := make([]devicetest.Row, n)
	for i := range rows {
		rows[i] = devicetest.Row{Index: i}
		if sick && i == 5 {
			rows[i].Status = "ECC_ERROR"
		}
	}
	root := devicetest.NewTree(t, rows...)
	f := &fixture{root: root, key: testKey(t, 7), legacy: legacyKey(t, 7)}
	f.store = inventory.New(device.NewSysfs(root, device.WithLogger(discard)), inventory.Options{Logger: discard})
	if _, err := f.store.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	led, err := ledger.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		Key: f.key, Store: f.store, Log: discard, Ledger: led,
		Options: inject.Options{Mounts: []inject.Mount{{HostPath: "/usr/lib/lpu"}}},
	}
	for _, o := range opts {
		o(&cfg)
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.p = p
	return f
}

// connect runs the plugin against rt until the test ends.
func (f *fixture) connect(t testing.TB, rt *nritest.Runtime) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &Runner{Plugin: f.p, Name: "lpu", Index: "10", Socket: rt.Socket, Log: discard,
		Backoff: backoff.Steps{Min: 20 * time.Millisecond, Max: 200 * time.Millisecond}}
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("runner: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("runner did not stop within 5s")
		}
	})
}

func pod(name string, ann map[string]string) *api.PodSandbox {
	return &api.PodSandbox{Id: "pod-" + name, Name: name, Uid: "uid-" + name, Namespace: "team", Annotations: ann}
}

func ctr(name string, ann map[string]string, env ...string) *api.Container {
	return &api.Container{Id: "ctr-" + name, PodSandboxId: "pod-" + name, Name: name, Annotations: ann, Env: env}
}

// view is the part of an adjustment the tests assert, in a printable shape.
type view struct {
	Devices []string // "/dev/lpu2 c 509:2 0666"
	Env     []string // "K=V"
	Mounts  []string // "src -> dst bind ro,..."
	Other   string   // anything else set in the adjustment
}

// verifiedOnly returns the runtime guard's annotation among anns (every
// verified allocation gets one; TestRuntimeGuard asserts it), so views
// show only the rest.
func verifiedOnly(anns map[string]string) map[string]string {
	if v, ok := anns[inject.AnnotationVerified]; ok {
		return map[string]string{inject.AnnotationVerified: v}
	}
	return nil
}

func viewOf(a *api.ContainerAdjustment) view {
	var v view
	if a == nil {
		return v
	}
	for _, d := range a.GetLinux().GetDevices() {
		mode := "-"
		if m := d.GetFileMode(); m != nil {
			mode = fmt.Sprintf("%04o", m.GetValue())
		}
		v.Devices = append(v.Devices, fmt.Sprintf("%s %s %d:%d %s", d.GetPath(), d.GetType(), d.GetMajor(), d.GetMinor(), mode))
	}
	for _, e := range a.GetEnv() {
		v.Env = append(v.Env, e.GetKey()+"="+e.GetValue())
	}
	for _, m := range a.GetMounts() {
		v.Mounts = append(v.Mounts, fmt.Sprintf("%s -> %s %s %s", m.GetSource(), m.GetDestination(), m.GetType(), strings.Join(m.GetOptions(), ",")))
	}
	if len(a.GetAnnotations()) > len(verifiedOnly(a.GetAnnotations())) || len(a.GetArgs()) > 0 || a.GetHooks().String() != "" || len(a.GetRlimits()) > 0 || len(a.GetCDIDevices()) > 0 {
		v.Other = a.String()
	}
	return v
}

func dev(i int) string { return fmt.Sprintf("/dev/lpu%d c %d:%d 0666", i, device.DefaultMajor, i) }

const driverEnv = inject.EnvDriverVersion + "=" + devicetest.DriverVersion
const libMount = "/usr/lib/lpu -> /usr/lib/lpu bind ro,nosuid,nodev,rbind,rprivate"

func counter(t testing.TB, c prometheus.Collector) float64 {
	t.Helper()
	m, ok := c.(prometheus.Metric)
	if !ok {
		t.Fatalf("%T is not a single metric", c)
	}
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		t.Fatal(err)
	}
	switch {
	case d.Counter != nil:
		return d.Counter.GetValue()
	case d.Gauge != nil:
		return d.Gauge.GetValue()
	case d.Histogram != nil:
		return float64(d.Histogram.GetSampleCount())
	}
	t.Fatalf("unsupported metric %v", &d)
	return 0
}

func TestCreateContainerThroughRuntime(t *testing.T) {
	f := newFixture(t, 8, true)
	other := testKey(t, 9)
	otherNode, err := inject.NewKey(slices.Repeat([]byte{7}, inject.KeySize)) // f.key's secret
	if err != nil {
		t.Fatal(err)
	}
	if otherNode, err = otherNode.ForNode("node-2"); err != nil {
		t.Fatal(err)
	}
	sealed := func(v string) map[string]string { return seal(t, f.key, v) }
	valid := seal(t, f.key, "lpu7", "lpu0", "lpu1") // wraps around the ring
	tests := map[string]struct {
		podAnn, ctrAnn map[string]string
		env            []string
		want           view
		reason         string // refusal reason; "" means accepted
		errHas         string
	}{
		"valid allocation in ring order": {
			ctrAnn: valid,
			want: view{
				Devices: []string{dev(7), dev(0), dev(1)},
				Env:     []string{"LPU_VISIBLE_DEVICES=7,0,1", "NUM_LPU_DEVICES=3", driverEnv},
				Mounts:  []string{libMount},
			},
		},
		"valid allocation overrides image env": {
			ctrAnn: seal(t, f.key, "lpu3"),
			env:    []string{"LPU_VISIBLE_DEVICES=0,1,2,3,4,5,6,7", "PATH=/bin"},
			want:   view{Devices: []string{dev(3)}, Env: []string{"LPU_VISIBLE_DEVICES=3", "NUM_LPU_DEVICES=1", driverEnv}, Mounts: []string{libMount}},
		},
		"forged annotation without seal": {
			ctrAnn: map[string]string{inject.AnnotationDevices: "lpu0,lpu1"},
			reason: metrics.ReasonBadSeal, errHas: "seal missing",
		},
		"seal made with another key": {
			ctrAnn: seal(t, other, "lpu0", "lpu1"),
			reason: metrics.ReasonBadSeal, errHas: "does not match",
		},
		"seal without devices": {
			ctrAnn: map[string]string{inject.AnnotationSeal: f.legacy.SealV1("lpu0")},
			reason: metrics.ReasonBadSeal, errHas: "without",
		},
		"validly sealed value also in pod annotations": {
			podAnn: valid, ctrAnn: valid,
			reason: metrics.ReasonPodAnnotation, errHas: `pod annotation "lpu.hyperaccel.ai/allocation"`,
		},
		"reserved key in another letter case in pod annotations": {
			podAnn: map[string]string{"LPU.hyperaccel.ai/devices": "lpu0"},
			ctrAnn: valid,
			reason: metrics.ReasonPodAnnotation, errHas: `pod annotation "LPU.hyperaccel.ai/devices"`,
		},
		"sealed on another node with the same key": {
			ctrAnn: seal(t, otherNode, "lpu0"),
			reason: metrics.ReasonBadSeal, errHas: `on node "node-1" (sealed on another node, or forged)`,
		},
		"legacy v1 seal while the switch is off": {
			ctrAnn: f.legacy.AnnotationsV1([]string{"lpu0"}),
			reason: metrics.ReasonLegacySeal, errHas: "security.acceptLegacySeals",
		},
		"key in pod annotations only": {
			podAnn: map[string]string{inject.AnnotationDevices: "lpu0"},
			reason: metrics.ReasonPodAnnotation, errHas: "a pod cannot claim LPUs",
		},
		"any reserved key in pod annotations": {
			podAnn: map[string]string{"lpu.hyperaccel.ai/anything": "x"},
			ctrAnn: valid,
			reason: metrics.ReasonPodAnnotation, errHas: "lpu.hyperaccel.ai/anything",
		},
		"unknown ID": {
			ctrAnn: sealed("lpu1,lpu42"),
			reason: metrics.ReasonUnknownDevice, errHas: `"lpu42" is not on this node`,
		},
		"path-like ID": {
			ctrAnn: sealed("../lpu0"),
			reason: metrics.ReasonBadValue, errHas: "want lpuN",
		},
		"absolute path ID": {
			ctrAnn: sealed("/dev/lpu0"),
			reason: metrics.ReasonBadValue, errHas: "want lpuN",
		},
		"duplicate IDs": {
			ctrAnn: sealed("lpu1,lpu2,lpu1"),
			reason: metrics.ReasonBadValue, errHas: "duplicates",
		},
		"oversized value": {
			ctrAnn: sealed(strings.Repeat("lpu1,", 1000) + "lpu1"),
			reason: metrics.ReasonBadValue, errHas: "limit",
		},
		"unhealthy device": {
			ctrAnn: seal(t, f.key, "lpu4", "lpu5"),
			reason: metrics.ReasonUnhealthyDevice, errHas: `lpu5 is unhealthy: status "ECC_ERROR"`,
		},
		"no allocation but LPU_VISIBLE_DEVICES in image env": {
			env:  []string{"LPU_VISIBLE_DEVICES=0,1", "HOME=/root"},
			want: view{Env: []string{"LPU_VISIBLE_DEVICES=none"}},
		},
		// containerd appends image and pod-spec env without merging them,
		// and NRI's env adjustment replaces only the first copy: the runtime
		// then rewrites it with the last, so the override would be lost.
		"no allocation, LPU_VISIBLE_DEVICES in image and pod env": {
			env:    []string{"LPU_VISIBLE_DEVICES=0,1", "HOME=/root", "LPU_VISIBLE_DEVICES=2"},
			reason: metrics.ReasonBadValue, errHas: "sets LPU_VISIBLE_DEVICES 2 times",
		},
		"valid allocation, LPU_VISIBLE_DEVICES twice in env": {
			ctrAnn: seal(t, f.key, "lpu3"),
			env:    []string{"LPU_VISIBLE_DEVICES=0", "LPU_VISIBLE_DEVICES=1"},
			reason: metrics.ReasonBadValue, errHas: "sets LPU_VISIBLE_DEVICES 2 times",
		},
		"no allocation, other-case and unset names are other variables": {
			env:  []string{"lpu_visible_devices=0", "LPU_VISIBLE_DEVICES", "LPU_VISIBLE_DEVICES =1", "LPU_VISIBLE_DEVICES=2"},
			want: view{Env: []string{"LPU_VISIBLE_DEVICES=none"}},
		},
		"no allocation, clean image": {
			ctrAnn: map[string]string{"other.example.com/x": "y"},
			want:   view{Env: []string{"LPU_VISIBLE_DEVICES=none"}},
		},
	}

	rt := nritest.New(t)
	rt.Start(t)
	f.connect(t, rt)
	rt.WaitPlugins(t, 1)

	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			m := f.p.Metrics()
			refusedBefore := 0.0
			if tc.reason != "" {
				refusedBefore = counter(t, m.Refusals.WithLabelValues(tc.reason))
			}
			injectedBefore := counter(t, m.Injections)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			rsp, err := rt.CreateContainer(ctx, pod("p", tc.podAnn), ctr("p", tc.ctrAnn, tc.env...))
			if tc.reason != "" {
				if err == nil {
					t.Fatalf("container accepted with %v, want refusal %q", viewOf(rsp.GetAdjust()), tc.reason)
				}
				if !strings.Contains(err.Error(), tc.errHas) || !strings.Contains(err.Error(), "lpu-nri refused the container") {
					t.Fatalf("error %q does not say %q", err, tc.errHas)
				}
				if got := counter(t, m.Refusals.WithLabelValues(tc.reason)); got != refusedBefore+1 {
					t.Fatalf("refusals{reason=%q} = %v, want %v", tc.reason, got, refusedBefore+1)
				}
				return
			}
			if err != nil {
				t.Fatalf("CreateContainer: %v", err)
			}
			got := viewOf(rsp.GetAdjust())
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("adjustment\n got %+v\nwant %+v", got, tc.want)
			}
			wantInj := injectedBefore
			if len(tc.want.Devices) > 0 {
				wantInj++
			}
			if got := counter(t, m.Injections); got != wantInj {
				t.Fatalf("injections = %v, want %v", got, wantInj)
			}
		})
	}
}

func TestRuntimeRestart(t *testing.T) {
	f := newFixture(t, 8, false)
	rt := nritest.New(t)
	rs, err := ready.Listen(ready.Path(rt.Dir))
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	f.p.ready = rs

	// The runtime is not there yet: the plugin keeps retrying, not ready.
	f.connect(t, rt)
	time.Sleep(150 * time.Millisecond)
	if err := ready.Check(context.Background(), ready.Path(rt.Dir)); !errors.Is(err, ready.ErrNotConnected) {
		t.Fatalf("readiness before the runtime exists = %v, want ErrNotConnected", err)
	}

	ann := seal(t, f.key, "lpu2", "lpu3")
	create := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		rsp, err := rt.CreateContainer(ctx, pod("r", nil), ctr("r", ann))
		if err != nil {
			return err
		}
		if got := viewOf(rsp.GetAdjust()).Devices; !slices.Equal(got, []string{dev(2), dev(3)}) {
			return fmt.Errorf("devices %v", got)
		}
		return nil
	}
	for round := range 3 {
		rt.Start(t)
		rt.WaitPlugins(t, 1)
		waitReady(t, rt.Dir, nil)
		if got := counter(t, f.p.Metrics().Connected); got != 1 {
			t.Fatalf("round %d: lpu_nri_connected = %v, want 1", round, got)
		}
		if err := create(); err != nil {
			t.Fatalf("round %d: injection after (re)connect: %v", round, err)
		}
		rt.Stop()
		waitReady(t, rt.Dir, ready.ErrNotConnected)
		if got := counter(t, f.p.Metrics().Connected); got != 0 {
			t.Fatalf("round %d: lpu_nri_connected = %v after runtime stop, want 0", round, got)
		}
	}
	if got := counter(t, f.p.Metrics().Reconnects); got != 3 {
		t.Fatalf("lpu_nri_connections_total = %v, want 3", got)
	}
}

// waitReady polls the readiness socket until Check returns want (nil or an
// error wrapping it).
func waitReady(t *testing.T, stateDir string, want error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := ready.Check(context.Background(), ready.Path(stateDir))
		if (want == nil && err == nil) || (want != nil && errors.Is(err, want)) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("readiness = %v after 10s, want %v", err, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// arcs returns n distinct allocations on one ring of size devices: arcs of
// 1..4 devices starting at every position.
func arcs(size, n int) [][]string {
	var out [][]string
	for l := 1; len(out) < n; l++ {
		for s := 0; s < size && len(out) < n; s++ {
			ids := make([]string, l)
			for i := range ids {
				ids[i] = device.ID((s + i) % size)
			}
			out = append(out, ids)
		}
	}
	return out
}

func TestConcurrentCreateContainer(t *testing.T) {
	const n = 200
	f := newFixture(t, 64, false)
	rt := nritest.New(t)
	rt.Start(t)
	f.connect(t, rt)
	rt.WaitPlugins(t, 1)

	allocs := arcs(64, n)
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

// TestConcurrentDecide runs the decision itself in parallel (the runtime
// serialises CreateContainer), under -race, while the inventory refreshes.
func TestConcurrentDecide(t *testing.T) {
	f := newFixture(t, 64, false)
	allocs := arcs(64, 200)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for ctx.Err() == nil {
			_, _ = f.store.Refresh(ctx)
		}
	}()
	var wg sync.WaitGroup
	for i, ids := range allocs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("c%d", i)
			adj, alloc, err := f.p.Decide(ctx, pod(name, nil), ctr(name, seal(t, f.key, ids...)))
			if err != nil || !slices.Equal(alloc.IDs, ids) || len(adj.GetLinux().GetDevices()) != len(ids) {
				t.Errorf("%s: Decide(%v) = %v, %v", name, ids, alloc.IDs, err)
			}
		}()
	}
	wg.Wait()
}

func TestSynchronizeAudit(t *testing.T) {
	f := newFixture(t, 8, false)
	node := func(i int) *api.LinuxDevice {
		return &api.LinuxDevice{Path: fmt.Sprintf("/dev/lpu%d", i), Type: "c", Major: device.DefaultMajor, Minor: int64(i)}
	}
	rt := nritest.New(t)
	add := func(name string, podAnn, ann map[string]string, state api.ContainerState, devs ...*api.LinuxDevice) {
		rt.AddPod(pod(name, podAnn))
		c := ctr(name, ann)
		c.State = state
		c.Linux = &api.LinuxContainer{Devices: devs}
		rt.AddContainer(c)
	}
	running := api.ContainerState_CONTAINER_RUNNING
	add("ok", nil, seal(t, f.key, "lpu0", "lpu1"), running, node(0), node(1))
	add("no-lpu", nil, nil, running, &api.LinuxDevice{Path: "/dev/fuse", Type: "c", Major: 10, Minor: 229})
	add("unannotated", nil, nil, running, node(3))
	add("renamed-node", nil, nil, running, &api.LinuxDevice{Path: "/dev/accel", Type: "c", Major: device.DefaultMajor, Minor: 4})
	add("beyond-allocation", nil, seal(t, f.key, "lpu5"), running, node(5), node(6))
	add("forged", nil, map[string]string{inject.AnnotationDevices: "lpu7"}, running, node(7))
	add("pod-claims", seal(t, f.key, "lpu2"), seal(t, f.key, "lpu2"), running, node(2))
	add("stopped", nil, nil, api.ContainerState_CONTAINER_STOPPED, node(3))

	rt.Start(t)
	f.connect(t, rt)
	rt.WaitPlugins(t, 1)
	if got, want := counter(t, f.p.Metrics().Unallocated), 5.0; got != want {
		t.Fatalf("lpu_nri_unallocated_holders = %v, want %v", got, want)
	}
}

// TestAuditByDeviceNumber: a held node is judged by the device it opens, not
// by the path it has in the container.
func TestAuditByDeviceNumber(t *testing.T) {
	f := newFixture(t, 8, false)
	dev := func(path string, minor int64) *api.LinuxDevice {
		return &api.LinuxDevice{Path: path, Type: "c", Major: device.DefaultMajor, Minor: minor}
	}
	tests := map[string]struct {
		ids     []string
		devs    []*api.LinuxDevice
		flagged bool
	}{
		"own node at its path":           {ids: []string{"lpu4"}, devs: []*api.LinuxDevice{dev("/dev/lpu4", 4)}},
		"own node at another path":       {ids: []string{"lpu4"}, devs: []*api.LinuxDevice{dev("/dev/accel0", 4)}},
		"own path, another LPU's number": {ids: []string{"lpu1"}, devs: []*api.LinuxDevice{dev("/dev/lpu1", 6)}, flagged: true},
		"two own nodes swapped":          {ids: []string{"lpu1", "lpu2"}, devs: []*api.LinuxDevice{dev("/dev/lpu1", 2), dev("/dev/lpu2", 1)}},
		"unknown number on our major":    {ids: []string{"lpu1"}, devs: []*api.LinuxDevice{dev("/dev/lpu1", 1), dev("/dev/x", 200)}, flagged: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c := ctr(name, seal(t, f.key, tc.ids...))
			c.State = api.ContainerState_CONTAINER_RUNNING
			c.Linux = &api.LinuxContainer{Devices: tc.devs}
			got := f.p.Audit([]*api.PodSandbox{pod(name, nil)}, []*api.Container{c})
			if want := map[bool]int{false: 0, true: 1}[tc.flagged]; got != want {
				t.Fatalf("Audit = %d holders, want %d", got, want)
			}
		})
	}
}

// TestAuditOrion: on an Orion node (xilinx backend) every LPU has two
// nodes; the audit knows both by number, and a GPU's render node on DRM's
// shared major is not an LPU's.
func TestAuditOrion(t *testing.T) {
	root := t.TempDir()
	if err := devicesim.Write(root, devicesim.Spec{Devices: 4, Rings: 1, Backend: device.BackendXilinx}); err != nil {
		t.Fatal(err)
	}
	store := inventory.New(device.NewSysfs(root, device.WithLogger(discard),
		device.WithDiscovery(device.Discovery{Backend: device.BackendXilinx})), inventory.Options{Logger: discard})
	if _, err := store.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	key := testKey(t, 7)
	p, err := New(Config{Key: key, Store: store, Log: discard})
	if err != nil {
		t.Fatal(err)
	}
	render := func(i int64) *api.LinuxDevice {
		return &api.LinuxDevice{Path: fmt.Sprintf("/dev/dri/renderD%d", 128+i), Type: "c", Major: devicesim.RenderMajor, Minor: 128 + i}
	}
	mgmt := func(i int64) *api.LinuxDevice {
		return &api.LinuxDevice{Path: "/dev/xclmgmt", Type: "c", Major: devicesim.XclmgmtMajor, Minor: i}
	}
	tests := map[string]struct {
		ids        []string
		devs       []*api.LinuxDevice
		flagged    bool
		uninjected bool
	}{
		"both nodes of its LPU":              {ids: []string{"lpu1"}, devs: []*api.LinuxDevice{render(1), mgmt(1)}},
		"only the render node of its LPU":    {ids: []string{"lpu1"}, devs: []*api.LinuxDevice{render(1)}, uninjected: true},
		"another LPU's management node":      {ids: []string{"lpu1"}, devs: []*api.LinuxDevice{render(1), mgmt(2)}, flagged: true},
		"no allocation, a management node":   {devs: []*api.LinuxDevice{mgmt(3)}, flagged: true},
		"no allocation, a GPU's render node": {devs: []*api.LinuxDevice{render(20)}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var ann map[string]string
			if tc.ids != nil {
				ann = seal(t, key, tc.ids...)
			}
			c := ctr(name, ann)
			c.State = api.ContainerState_CONTAINER_RUNNING
			c.Linux = &api.LinuxContainer{Devices: tc.devs}
			holders, uninjected := p.AuditCounts([]*api.PodSandbox{pod(name, nil)}, []*api.Container{c})
			if want := map[bool]int{false: 0, true: 1}[tc.flagged]; holders != want {
				t.Fatalf("AuditCounts = %d holders, want %d", holders, want)
			}
			if want := map[bool]int{false: 0, true: 1}[tc.uninjected]; uninjected != want {
				t.Fatalf("AuditCounts = %d uninjected, want %d", uninjected, want)
			}
		})
	}

	// The validator grants every node of an allocated LPU: lpu-nri's own
	// adjustment (render and management node) passes, one more LPU's
	// management node is refused.
	pd, c := pod("v", nil), ctr("v", seal(t, key, "lpu1"))
	adj, _, err := p.Decide(context.Background(), pd, c)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(adj.GetLinux().GetDevices()); n != 2 {
		t.Fatalf("adjustment has %d devices, want render and management node", n)
	}
	if err := p.Validate(pd, c, adj); err != nil {
		t.Fatalf("lpu-nri's own Orion adjustment refused: %v", err)
	}
	extra := &api.ContainerAdjustment{Linux: &api.LinuxContainerAdjustment{
		Devices: append(slices.Clone(adj.GetLinux().GetDevices()), &api.LinuxDevice{Path: "/dev/xclmgmt2", Type: "c", Major: devicesim.XclmgmtMajor, Minor: 2})}}
	if err := p.Validate(pd, c, extra); err == nil {
		t.Fatal("validated another LPU's management node")
	}
}

func TestPodResourcesCrossCheck(t *testing.T) {
	errMismatch := errors.New("kubelet says lpu0")
	tests := map[string]struct {
		check  CrossChecker
		reason string
	}{
		"agrees":    {check: checkFunc(func([]string) error { return nil })},
		"disagrees": {check: checkFunc(func([]string) error { return errMismatch }), reason: metrics.ReasonPodResources},
		"hangs": {check: checkFunc(func([]string) error { time.Sleep(3 * time.Second); return nil }),
			reason: metrics.ReasonPodResources},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, 8, false, func(c *Config) { c.Check = tc.check; c.CheckTimeout = 50 * time.Millisecond })
			start := time.Now()
			_, alloc, err := f.p.Decide(context.Background(), pod("x", nil), ctr("x", seal(t, f.key, "lpu1")))
			if d := time.Since(start); d > time.Second {
				t.Fatalf("Decide took %v, want the check bounded by its timeout", d)
			}
			var r *Refusal
			switch {
			case tc.reason == "" && (err != nil || !slices.Equal(alloc.IDs, []string{"lpu1"})):
				t.Fatalf("Decide = %v, %v; want lpu1", alloc.IDs, err)
			case tc.reason != "" && (!errors.As(err, &r) || r.Reason != tc.reason):
				t.Fatalf("Decide error = %v, want refusal %q", err, tc.reason)
			}
		})
	}
}

// checkFunc is a CrossChecker honouring ctx.
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
	f := newFixture(t, 8, false)
	id := inject.NewAllocationID()
	withID, err := f.key.AnnotationsWithID([]string{"lpu2", "lpu3"}, id)
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
		"allocation ID swapped":         {ann: swapped, reason: metrics.ReasonBadSeal},
		"allocation ID without devices": {ann: idOnly, reason: metrics.ReasonBadSeal},
		"legacy annotations, no ID":     {ann: f.legacy.AnnotationsV1([]string{"lpu2"}), reason: metrics.ReasonLegacySeal},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, alloc, err := f.p.Decide(context.Background(), pod("a", nil), ctr("a", tc.ann))
			var r *Refusal
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
	f := newFixture(t, 4, false)
	ann := seal(t, f.key, "lpu4")
	if _, _, err := f.p.Decide(context.Background(), pod("x", nil), ctr("x", ann)); err == nil {
		t.Fatal("lpu4 accepted before it exists")
	}
	devicetest.AddDevice(t, f.root, devicetest.Row{Index: 4})
	if _, err := f.store.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, alloc, err := f.p.Decide(context.Background(), pod("x", nil), ctr("x", ann)); err != nil || !slices.Equal(alloc.IDs, []string{"lpu4"}) {
		t.Fatalf("after rescan: %v, %v", alloc.IDs, err)
	}
	devicetest.SetStatus(t, f.root, "lpu4", "FAILED")
	if _, err := f.store.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	var r *Refusal
	if _, _, err := f.p.Decide(context.Background(), pod("x", nil), ctr("x", ann)); !errors.As(err, &r) || r.Reason != metrics.ReasonUnhealthyDevice {
		t.Fatalf("after lpu4 failed: %v, want unhealthy refusal", err)
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
	if got := counter(t, f.p.Metrics().Refusals.WithLabelValues(metrics.ReasonReplayed)); got != 1 {
		t.Errorf("refusals{reason=replayed} = %v, want 1", got)
	}

	// A new lpu-nri over the same state dir remembers.
	f2 := newFixture(t, 8, false, withLedger)
	if _, _, err := f2.p.Decide(context.Background(), thief, ctr("thief", ann)); err == nil {
		t.Fatal("replay accepted after restart")
	}
	if _, _, err := f2.p.Decide(context.Background(), victim, ctr("victim", ann)); err != nil {
		t.Fatalf("victim's restart after lpu-nri restart: %v", err)
	}
}

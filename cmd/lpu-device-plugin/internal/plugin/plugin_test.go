package plugin

import (
	"context"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	oteltrace "go.opentelemetry.io/otel/trace"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/hyperaccel/lpu-node/config"
	"github.com/hyperaccel/lpu-node/internal/backoff"
	"github.com/hyperaccel/lpu-node/internal/daemontest"
	"github.com/hyperaccel/lpu-node/internal/health"
	"github.com/hyperaccel/lpu-node/internal/kubelettest"
	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/device/devicetest"
	"github.com/hyperaccel/lpu-node/pkg/inject"
	"github.com/hyperaccel/lpu-node/pkg/ready"
)

const resource = "hyperaccel.ai/lpu"

// counts is a Recorder that counts what the plugin reports.
type counts struct {
	mu          sync.Mutex
	results     map[string]int
	registered  int
	preferred   int
	allocations int
}

func (c *counts) Allocation(r string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.results == nil {
		c.results = map[string]int{}
	}
	c.results[r]++
}
func (c *counts) PreferredDuration(time.Duration) { c.mu.Lock(); c.preferred++; c.mu.Unlock() }
func (c *counts) AllocateDuration(time.Duration)  { c.mu.Lock(); c.allocations++; c.mu.Unlock() }
func (c *counts) Registered()                     { c.mu.Lock(); c.registered++; c.mu.Unlock() }
func (c *counts) result(r string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.results[r]
}

// node is one plugin on a fake tree, registered with a test kubelet.
type node struct {
	root    string
	dir     string // kubelet device-plugin dir
	state   string
	kubelet *kubelettest.Kubelet
	plugin  *Plugin
	key     *inject.Key
	rec     *counts
	reg     *pluginapi.RegisterRequest
	client  *kubelettest.Client
	cancel  context.CancelFunc
	done    chan error
	parts   int // goroutines that report to done
}

type setup struct {
	rows      []devicetest.Row
	injection string
	policy    string
	noKubelet bool
	tracer    oteltrace.Tracer // nil traces nothing
	guard     bool             // Options.RuntimeGuard
	cordon    Cordon           // non-nil: serve a CordonSource over the monitor
}

// twoRings is 16 devices on rings lpu0..lpu7 and lpu8..lpu15 (sysfs ring
// attributes).
func twoRings() []devicetest.Row {
	rows := make([]devicetest.Row, 16)
	for i := range rows {
		rows[i] = devicetest.Row{Index: i, NUMA: []string{"0", "1"}[i/8], Ring: &devicetest.Ring{ID: i / 8, Position: i % 8}}
	}
	return rows
}

func eight() []devicetest.Row {
	rows := make([]devicetest.Row, 8)
	for i := range rows {
		rows[i] = devicetest.Row{Index: i}
	}
	return rows
}

// testNode is the node name the test seal keys are bound to.
const testNode = "node-1"

func start(t testing.TB, s setup) *node {
	t.Helper()
	n := &node{root: devicetest.NewTree(t, s.rows...), dir: daemontest.ShortDir(t), state: daemontest.ShortDir(t), rec: &counts{}}
	if s.injection == "" {
		s.injection = config.InjectionNRI
	}
	if s.policy == "" {
		s.policy = config.PolicyBestEffort
	}
	key, err := inject.LoadOrCreateKey(n.state)
	if err != nil {
		t.Fatal(err)
	}
	if key, err = key.ForNode(testNode); err != nil {
		t.Fatal(err)
	}
	n.key = key
	if !s.noKubelet {
		n.kubelet = kubelettest.Start(t, n.dir)
	}
	mon := health.New(device.NewSysfs(n.root), health.Options{ResyncInterval: time.Hour, ProbeInterval: 20 * time.Millisecond})
	var src Source = mon
	var cs *CordonSource
	if s.cordon != nil {
		cs = NewCordonSource(mon, s.cordon, slog.New(slog.NewTextHandler(t.Output(), nil)))
		src = cs
	}
	n.plugin, err = New(src, Options{
		ResourceName: resource, KubeletDir: n.dir, StateDir: n.state,
		Injection: s.injection, Policy: s.policy, Key: key, Recorder: n.rec, Tracer: s.tracer,
		PreStartTimeout: 500 * time.Millisecond, RuntimeGuard: s.guard,
		Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel, n.done, n.parts = cancel, make(chan error, 3), 2
	go func() { n.done <- mon.Run(ctx) }()
	if cs != nil {
		n.parts++
		go func() { n.done <- cs.Run(ctx) }()
	}
	<-mon.Ready()
	go func() { n.done <- n.plugin.Run(ctx) }()
	t.Cleanup(n.stop)
	if !s.noKubelet {
		n.reg = n.kubelet.WaitRegistration(t, 5*time.Second)
		daemontest.Eventually(t, 5*time.Second, "registration acknowledged", n.plugin.Registered)
		n.client = n.kubelet.Dial(t, n.reg)
	}
	return n
}

func (n *node) stop() {
	n.cancel()
	for range n.parts {
		<-n.done //nolint:errcheck // Run returns nil on cancellation; the test checked the rest
	}
}

func TestRegistration(t *testing.T) {
	n := start(t, setup{rows: eight()})
	if n.reg.Version != pluginapi.Version || n.reg.Endpoint != "lpu.sock" || n.reg.ResourceName != resource {
		t.Fatalf("registration = %+v", n.reg)
	}
	if !n.reg.Options.GetPreStartRequired() || !n.reg.Options.GetGetPreferredAllocationAvailable() {
		t.Fatalf("registration options = %+v, want PreStartRequired and GetPreferredAllocationAvailable", n.reg.Options)
	}
	if _, err := os.Stat(filepath.Join(n.dir, "lpu.sock")); err != nil {
		t.Fatalf("plugin socket: %v", err)
	}
	opts, err := n.client.GetDevicePluginOptions(context.Background(), &pluginapi.Empty{})
	if err != nil || !opts.PreStartRequired || !opts.GetPreferredAllocationAvailable {
		t.Fatalf("GetDevicePluginOptions = %+v, %v", opts, err)
	}
	daemontest.Eventually(t, time.Second, "Registered()", n.plugin.Registered)
}

func TestListAndWatch(t *testing.T) {
	n := start(t, setup{rows: twoRings()})
	s := n.client.Watch(t)
	devs := s.Next(t, 2*time.Second)
	if len(devs) != 16 {
		t.Fatalf("got %d devices, want 16: %s", len(devs), kubelettest.Format(devs))
	}
	for i, d := range devs {
		if d.ID != device.ID(i) || d.Health != pluginapi.Healthy {
			t.Fatalf("device %d = %v", i, d)
		}
		nodes := d.GetTopology().GetNodes()
		if len(nodes) != 1 || nodes[0].ID != int64(i/8) {
			t.Fatalf("device %s topology = %v, want NUMA node %d", d.ID, d.Topology, i/8)
		}
	}

	steps := map[string]struct {
		breakIt, fixIt func()
	}{
		"bad status": {
			breakIt: func() { devicetest.SetStatus(t, n.root, "lpu3", "ECC_ERROR") },
			fixIt:   func() { devicetest.SetStatus(t, n.root, "lpu3", device.StatusReady) },
		},
		"device node removed": {
			breakIt: func() { devicetest.RemoveNode(t, n.root, "lpu3") },
			fixIt:   func() { devicetest.CreateNode(t, n.root, "lpu3") },
		},
	}
	for _, name := range []string{"bad status", "device node removed"} {
		step := steps[name]
		t.Run(name, func(t *testing.T) {
			step.breakIt()
			s.WaitFor(t, time.Second, "lpu3 Unhealthy", func(d []*pluginapi.Device) bool {
				h := kubelettest.Health(d)
				return h["lpu3"] == pluginapi.Unhealthy && h["lpu2"] == pluginapi.Healthy && len(d) == 16
			})
			step.fixIt()
			s.WaitFor(t, time.Second, "lpu3 Healthy again", func(d []*pluginapi.Device) bool {
				return kubelettest.Health(d)["lpu3"] == pluginapi.Healthy
			})
		})
	}

	t.Run("device appears", func(t *testing.T) {
		devicetest.AddDevice(t, n.root, devicetest.Row{Index: 16, Ring: &devicetest.Ring{ID: 2, Position: 0}})
		s.WaitFor(t, time.Second, "lpu16 listed", func(d []*pluginapi.Device) bool {
			return kubelettest.Health(d)["lpu16"] == pluginapi.Healthy
		})
	})
}

// waitRegistered waits for the next registration and checks it names our
// socket, which must exist again.
func waitRegistered(t *testing.T, n *node, within time.Duration) {
	t.Helper()
	began := time.Now()
	req := n.kubelet.WaitRegistration(t, within)
	t.Logf("re-registered after %v", time.Since(began))
	if req.Endpoint != "lpu.sock" {
		t.Fatalf("endpoint %q", req.Endpoint)
	}
	if _, err := os.Stat(filepath.Join(n.dir, req.Endpoint)); err != nil {
		t.Fatalf("socket after re-registration: %v", err)
	}
	// The new endpoint serves: a fresh kubelet connection lists devices.
	c := n.kubelet.Dial(t, req)
	if devs := c.Watch(t).Next(t, 2*time.Second); len(devs) != 8 {
		t.Fatalf("after re-registration: %d devices", len(devs))
	}
}

func TestReregistration(t *testing.T) {
	tests := map[string]func(t *testing.T, n *node){
		"plugin socket removed": func(t *testing.T, n *node) {
			if err := os.Remove(filepath.Join(n.dir, "lpu.sock")); err != nil {
				t.Fatal(err)
			}
		},
		"kubelet restarted":      func(t *testing.T, n *node) { n.kubelet.Restart(t) },
		"kubelet.sock recreated": func(t *testing.T, n *node) { n.kubelet.Recreate(t) },
		"stream closed by kubelet": func(t *testing.T, n *node) {
			s := n.client.Watch(t)
			s.Next(t, time.Second)
			s.Close()
		},
	}
	for name, trigger := range tests {
		t.Run(name, func(t *testing.T) {
			n := start(t, setup{rows: eight()})
			trigger(t, n)
			waitRegistered(t, n, time.Second)
			// Our own socket churn must not cause a registration storm.
			time.Sleep(300 * time.Millisecond)
			if got := len(n.kubelet.Registrations()); got != 2 {
				t.Fatalf("registrations = %d, want 2", got)
			}
		})
	}
}

func TestReregistrationRepeated(t *testing.T) {
	n := start(t, setup{rows: eight()})
	recorded := func() int {
		n.rec.mu.Lock()
		defer n.rec.mu.Unlock()
		return n.rec.registered
	}
	for i := range 3 {
		// Restart only once the plugin has seen Register succeed: a
		// restart racing the response makes the plugin retry (correct,
		// but not what this test counts).
		daemontest.Eventually(t, time.Second, "registration acknowledged", func() bool { return recorded() == i+1 })
		n.kubelet.Restart(t)
		waitRegistered(t, n, time.Second)
		if got := len(n.kubelet.Registrations()); got != i+2 {
			t.Fatalf("after restart %d: registrations = %d", i, got)
		}
	}
	daemontest.Eventually(t, time.Second, "4 recorded registrations", func() bool { return recorded() == 4 })
}

// TestReregistrationKubeletSlowToListen: a kubelet restarted soon after the
// plugin registered creates kubelet.sock before it accepts connections; the
// first attempts are refused, and the plugin must keep retrying at the
// shortest delay rather than back off past the one-second budget.
func TestReregistrationKubeletSlowToListen(t *testing.T) {
	n := start(t, setup{rows: eight()})
	daemontest.Eventually(t, time.Second, "registration acknowledged", func() bool {
		n.rec.mu.Lock()
		defer n.rec.mu.Unlock()
		return n.rec.registered == 1
	})
	const slow = 700 * time.Millisecond
	n.kubelet.RestartListenLater(t, slow)
	listening := time.Now()
	n.kubelet.WaitRegistration(t, time.Second)
	// Retries every MinBackoff (100ms) land within about one step of the
	// kubelet listening; the doubling backoff waited 100+200+400+800ms.
	if d := time.Since(listening); d > 350*time.Millisecond {
		t.Fatalf("re-registered %v after the kubelet started listening, want < 350ms", d)
	}
}

func TestKubeletAbsentAtStart(t *testing.T) {
	n := start(t, setup{rows: eight(), noKubelet: true})
	time.Sleep(300 * time.Millisecond) // a few failed attempts
	if n.plugin.Registered() {
		t.Fatal("registered without a kubelet")
	}
	n.kubelet = kubelettest.Start(t, n.dir)
	waitRegistered(t, n, time.Second)
	daemontest.Eventually(t, time.Second, "Registered()", n.plugin.Registered)
}

func TestKubeletDirMissing(t *testing.T) {
	n := start(t, setup{rows: eight(), noKubelet: true})
	// Point a second plugin at a directory that does not exist yet.
	dir := filepath.Join(n.dir, "later")
	mon := health.New(device.NewSysfs(n.root), health.Options{ResyncInterval: time.Hour})
	p, err := New(mon, Options{ResourceName: resource, KubeletDir: dir, StateDir: n.state, Injection: config.InjectionCDI, Policy: config.PolicyStrict, Backoff: backoff.Steps{Max: 200 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	go func() { done <- mon.Run(ctx) }()
	go func() { done <- p.Run(ctx) }()
	defer func() {
		cancel()
		for range 2 {
			if err := <-done; err != nil {
				t.Error(err)
			}
		}
	}()
	time.Sleep(300 * time.Millisecond)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	k := kubelettest.Start(t, dir)
	k.WaitRegistration(t, 2*time.Second)
}

func TestPreferredAllocation(t *testing.T) {
	n := start(t, setup{rows: twoRings()})
	devicetest.SetStatus(t, n.root, "lpu12", "ECC_ERROR")
	n.client.Watch(t).WaitFor(t, time.Second, "lpu12 unhealthy", func(d []*pluginapi.Device) bool {
		return kubelettest.Health(d)["lpu12"] == pluginapi.Unhealthy
	})
	ids := func(idx ...int) []string {
		out := make([]string, len(idx))
		for i, x := range idx {
			out[i] = device.ID(x)
		}
		return out
	}
	tests := map[string]struct {
		available, must []string
		size            int
		want            []string // nil: any answer of size with the checks below
		contiguous      bool
	}{
		"whole free ring": {
			available: ids(0, 1, 2, 3, 4, 5, 6, 7), size: 4, contiguous: true,
		},
		"fragmented ring picks the only arc": {
			// free: 0,1 | 3 | 5,6,7 → only 5,6,7 holds 3
			available: ids(0, 1, 3, 5, 6, 7), size: 3, want: ids(5, 6, 7), contiguous: true,
		},
		"wrap-around arc": {
			available: ids(6, 7, 0, 1, 3), size: 4, want: ids(6, 7, 0, 1), contiguous: true,
		},
		"never across rings": {
			available: ids(6, 7, 8, 9), size: 2, contiguous: true,
		},
		"must include": {
			available: ids(0, 1, 2, 3, 4, 5, 6, 7), must: ids(5), size: 2, contiguous: true,
		},
		"unhealthy device excluded": {
			// lpu12 is unhealthy: 10,11 | 13,14 — no arc of 3 on ring 1
			available: ids(10, 11, 12, 13, 14), size: 3,
		},
		"no contiguous arc: least fragmented": {
			available: ids(0, 2, 4, 5), size: 3,
		},
		"more than available: empty": {
			available: ids(0, 1), size: 3, want: []string{},
		},
		"unknown available ignored": {
			available: []string{"lpu99", "gpu0", "lpu0", "lpu1"}, size: 2, want: ids(0, 1), contiguous: true,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			resp, err := n.client.GetPreferredAllocation(context.Background(), &pluginapi.PreferredAllocationRequest{
				ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{
					AvailableDeviceIDs: tc.available, MustIncludeDeviceIDs: tc.must, AllocationSize: int32(tc.size),
				}},
			})
			if err != nil {
				t.Fatalf("GetPreferredAllocation must never fail: %v", err)
			}
			if len(resp.ContainerResponses) != 1 {
				t.Fatalf("%d container responses", len(resp.ContainerResponses))
			}
			got := resp.ContainerResponses[0].DeviceIDs
			if tc.want != nil {
				if !slices.Equal(got, tc.want) {
					t.Fatalf("got %v, want %v", got, tc.want)
				}
				return
			}
			if len(got) != tc.size {
				t.Fatalf("got %v, want %d devices", got, tc.size)
			}
			for _, id := range got {
				if !slices.Contains(tc.available, id) || id == "lpu12" {
					t.Fatalf("got %v: %s not available and healthy", got, id)
				}
			}
			for _, id := range tc.must {
				if !slices.Contains(got, id) {
					t.Fatalf("got %v without must-include %s", got, id)
				}
			}
			snap, _ := n.plugin.src.Snapshot()
			pl, err := snap.Layout.Check(got)
			if err != nil {
				t.Fatal(err)
			}
			if tc.contiguous && !pl.Contiguous {
				t.Fatalf("got %v, not contiguous: %s", got, pl.Reason)
			}
		})
	}
}

func TestPreferredAllocationMultiContainer(t *testing.T) {
	n := start(t, setup{rows: eight()})
	all := []string{"lpu0", "lpu1", "lpu2", "lpu3", "lpu4", "lpu5", "lpu6", "lpu7"}
	resp, err := n.client.GetPreferredAllocation(context.Background(), &pluginapi.PreferredAllocationRequest{
		ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{
			{AvailableDeviceIDs: all, AllocationSize: 2},
			{AvailableDeviceIDs: all, AllocationSize: 9},
		},
	})
	if err != nil || len(resp.ContainerResponses) != 2 {
		t.Fatalf("resp %v err %v", resp, err)
	}
	if len(resp.ContainerResponses[0].DeviceIDs) != 2 || len(resp.ContainerResponses[1].DeviceIDs) != 0 {
		t.Fatalf("responses %v", resp.ContainerResponses)
	}
}

func allocate(n *node, ids ...[]string) (*pluginapi.AllocateResponse, error) {
	req := &pluginapi.AllocateRequest{}
	for _, c := range ids {
		req.ContainerRequests = append(req.ContainerRequests, &pluginapi.ContainerAllocateRequest{DevicesIds: c})
	}
	return n.client.Allocate(context.Background(), req)
}

func TestAllocate(t *testing.T) {
	tests := map[string]struct {
		ids       []string
		policy    string
		wantIDs   []string // ring order in the sealed annotation
		wantErr   []string // substrings of the error
		wantCount string
	}{
		"contiguous best-effort": {
			ids: []string{"lpu3", "lpu1", "lpu2"}, policy: config.PolicyBestEffort,
			wantIDs: []string{"lpu1", "lpu2", "lpu3"}, wantCount: ResultContiguous,
		},
		"contiguous strict": {
			ids: []string{"lpu0", "lpu7"}, policy: config.PolicyStrict,
			wantIDs: []string{"lpu7", "lpu0"}, wantCount: ResultContiguous,
		},
		"non-contiguous best-effort accepted": {
			ids: []string{"lpu4", "lpu0"}, policy: config.PolicyBestEffort,
			wantIDs: []string{"lpu0", "lpu4"}, wantCount: ResultNonContiguous,
		},
		"non-contiguous strict refused": {
			ids: []string{"lpu4", "lpu0"}, policy: config.PolicyStrict,
			wantErr: []string{"lpu0,lpu4", "not one contiguous ring arc", "strict"}, wantCount: ResultRefused,
		},
		"cross-ring best-effort accepted": {
			ids: []string{"lpu8", "lpu7"}, policy: config.PolicyBestEffort,
			wantIDs: []string{"lpu7", "lpu8"}, wantCount: ResultNonContiguous,
		},
		"cross-ring strict refused": {
			ids: []string{"lpu8", "lpu7"}, policy: config.PolicyStrict,
			wantErr: []string{"lpu7,lpu8", "spans rings 0 and 1"}, wantCount: ResultRefused,
		},
		"unknown refused best-effort": {
			ids: []string{"lpu1", "lpu42"}, policy: config.PolicyBestEffort,
			wantErr: []string{`unknown device IDs "lpu42"`}, wantCount: ResultRefused,
		},
		"unknown refused strict": {
			ids: []string{"lpu42"}, policy: config.PolicyStrict,
			wantErr: []string{`unknown device IDs "lpu42"`}, wantCount: ResultRefused,
		},
		"unhealthy refused best-effort": {
			ids: []string{"lpu5", "lpu6"}, policy: config.PolicyBestEffort,
			wantErr: []string{"unhealthy devices lpu5", "ECC_ERROR"}, wantCount: ResultRefused,
		},
		"unhealthy refused strict": {
			ids: []string{"lpu5"}, policy: config.PolicyStrict,
			wantErr: []string{"unhealthy devices lpu5"}, wantCount: ResultRefused,
		},
		"duplicate refused": {
			ids: []string{"lpu1", "lpu1"}, policy: config.PolicyBestEffort,
			wantErr: []string{"duplicate device IDs: lpu1"}, wantCount: ResultRefused,
		},
		"empty refused": {
			ids: nil, policy: config.PolicyBestEffort,
			wantErr: []string{"no device IDs"}, wantCount: ResultRefused,
		},
	}
	nodes := map[string]*node{}
	for _, policy := range []string{config.PolicyBestEffort, config.PolicyStrict} {
		n := start(t, setup{rows: twoRings(), policy: policy})
		devicetest.SetStatus(t, n.root, "lpu5", "ECC_ERROR")
		n.client.Watch(t).WaitFor(t, time.Second, "lpu5 unhealthy", func(d []*pluginapi.Device) bool {
			return kubelettest.Health(d)["lpu5"] == pluginapi.Unhealthy
		})
		nodes[policy] = n
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			n := nodes[tc.policy]
			before := n.rec.result(tc.wantCount)
			resp, err := allocate(n, tc.ids)
			if after := n.rec.result(tc.wantCount); after != before+1 {
				t.Errorf("%s count %d → %d, want +1", tc.wantCount, before, after)
			}
			if tc.wantErr != nil {
				if err == nil {
					t.Fatalf("Allocate(%v) = %v, want error", tc.ids, resp)
				}
				for _, s := range tc.wantErr {
					if !strings.Contains(err.Error(), s) {
						t.Fatalf("error %q does not mention %q", err, s)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("Allocate(%v): %v", tc.ids, err)
			}
			c := resp.ContainerResponses[0]
			if len(c.Devices) != 0 || len(c.Mounts) != 0 || len(c.Envs) != 0 || len(c.CdiDevices) != 0 {
				t.Fatalf("nri mode must return only annotations, got %v", c)
			}
			if len(c.Annotations) != 4 {
				t.Fatalf("annotations %v, want devices, seal, allocation ID and its seal", c.Annotations)
			}
			got, err := n.key.OpenAllocation(c.Annotations)
			if err != nil {
				t.Fatalf("seal does not verify: %v", err)
			}
			if !slices.Equal(got.IDs, tc.wantIDs) || got.ID == "" {
				t.Fatalf("sealed %+v, want IDs %v (ring order) and an allocation ID", got, tc.wantIDs)
			}
		})
	}
}

func TestAllocateMultiContainer(t *testing.T) {
	n := start(t, setup{rows: eight(), policy: config.PolicyStrict})
	resp, err := allocate(n, []string{"lpu1", "lpu0"}, []string{"lpu4", "lpu5", "lpu6", "lpu7"})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.ContainerResponses) != 2 {
		t.Fatalf("%d responses", len(resp.ContainerResponses))
	}
	for i, want := range [][]string{{"lpu0", "lpu1"}, {"lpu4", "lpu5", "lpu6", "lpu7"}} {
		got, err := n.key.Open(resp.ContainerResponses[i].Annotations)
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("container %d: %v %v, want %v", i, got, err, want)
		}
	}
	if n.rec.result(ResultContiguous) != 2 {
		t.Fatalf("contiguous count %d, want 2", n.rec.result(ResultContiguous))
	}

	// One bad container fails the whole call and counts one refusal only.
	_, err = allocate(n, []string{"lpu2", "lpu3"}, []string{"lpu0", "lpu4"})
	if err == nil || !strings.Contains(err.Error(), "container request 1") {
		t.Fatalf("err = %v, want refusal naming container request 1", err)
	}
	if c, r := n.rec.result(ResultContiguous), n.rec.result(ResultRefused); c != 2 || r != 1 {
		t.Fatalf("counts contiguous=%d refused=%d, want 2 and 1", c, r)
	}
}

func TestAllocateStateless(t *testing.T) {
	n := start(t, setup{rows: eight()})
	a, err := allocate(n, []string{"lpu2", "lpu3"})
	if err != nil {
		t.Fatal(err)
	}
	// Same devices again (kubelet replays after a restart): same answer.
	b, err := allocate(n, []string{"lpu3", "lpu2"})
	if err != nil {
		t.Fatal(err)
	}
	// Only the allocation ID (fresh per call, for tracing) differs.
	contract := func(m map[string]string) map[string]string {
		return map[string]string{inject.AnnotationDevices: m[inject.AnnotationDevices], inject.AnnotationSeal: m[inject.AnnotationSeal]}
	}
	ca, cb := contract(a.ContainerResponses[0].Annotations), contract(b.ContainerResponses[0].Annotations)
	if !maps.Equal(ca, cb) {
		t.Fatalf("answers differ: %v vs %v", ca, cb)
	}
	if a.ContainerResponses[0].Annotations[inject.AnnotationAllocation] == b.ContainerResponses[0].Annotations[inject.AnnotationAllocation] {
		t.Fatal("two allocations share an allocation ID")
	}
	// A restarted plugin (new process, same state dir) gives the same seal,
	// and what kubelet replays from its checkpoint still opens.
	key, err := inject.LoadOrCreateKey(n.state)
	if err != nil {
		t.Fatal(err)
	}
	if key, err = key.ForNode(testNode); err != nil {
		t.Fatal(err)
	}
	got, err := key.AnnotationsWithID([]string{"lpu2", "lpu3"}, a.ContainerResponses[0].Annotations[inject.AnnotationAllocation])
	if err != nil || !maps.Equal(got, a.ContainerResponses[0].Annotations) {
		t.Fatalf("restarted key seals differently: %v, %v", got, err)
	}
	if _, err := key.OpenAllocation(a.ContainerResponses[0].Annotations); err != nil {
		t.Fatalf("replayed annotations do not open after a restart: %v", err)
	}
}

// TestAllocateRuntimeGuard: with security.runtimeGuard, an nri-mode
// allocation also names the guard's CDI device (the runtime adds its hook
// whether or not lpu-nri answers); without it, none.
func TestAllocateRuntimeGuard(t *testing.T) {
	for _, on := range []bool{true, false} {
		n := start(t, setup{rows: eight(), injection: config.InjectionNRI, guard: on})
		resp, err := allocate(n, []string{"lpu0", "lpu1"})
		if err != nil {
			t.Fatal(err)
		}
		c := resp.ContainerResponses[0]
		var names []string
		for _, d := range c.CdiDevices {
			names = append(names, d.Name)
		}
		want := []string(nil)
		if on {
			want = []string{inject.GuardDevice}
		}
		if !slices.Equal(names, want) {
			t.Errorf("runtimeGuard %v: CDI devices %v, want %v", on, names, want)
		}
		if c.Annotations[inject.AnnotationDevices] != "lpu0,lpu1" {
			t.Errorf("runtimeGuard %v: annotations %v lost the sealed allocation", on, c.Annotations)
		}
	}
}

func TestAllocateCDI(t *testing.T) {
	n := start(t, setup{rows: eight(), injection: config.InjectionCDI})
	resp, err := allocate(n, []string{"lpu0", "lpu6", "lpu7"})
	if err != nil {
		t.Fatal(err)
	}
	c := resp.ContainerResponses[0]
	var names []string
	for _, d := range c.CdiDevices {
		names = append(names, d.Name)
	}
	want := []string{"hyperaccel.ai/lpu=lpu6", "hyperaccel.ai/lpu=lpu7", "hyperaccel.ai/lpu=lpu0"}
	if !slices.Equal(names, want) {
		t.Fatalf("CDIDevices %v, want %v", names, want)
	}
	if got := c.Envs[inject.EnvVisibleDevices]; got != "6,7,0" {
		t.Fatalf("%s = %q, want 6,7,0 (ring order)", inject.EnvVisibleDevices, got)
	}
	keys, devs, err := cdi.ParseAnnotations(c.Annotations)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 || !strings.HasPrefix(keys[0], cdi.AnnotationPrefix) || !slices.Equal(devs, want) {
		t.Fatalf("CDI annotation keys %v devices %v, want one key listing %v", keys, devs, want)
	}
	if len(c.Annotations) != 1 {
		t.Fatalf("annotations %v: cdi mode must not carry the sealed annotation", c.Annotations)
	}
	if len(c.Devices) != 0 || len(c.Mounts) != 0 {
		t.Fatalf("cdi mode returns no raw devices or mounts: %v", c)
	}
	// No readiness needed in cdi mode.
	if _, err := n.client.PreStartContainer(context.Background(), &pluginapi.PreStartContainerRequest{DevicesIds: []string{"lpu0"}}); err != nil {
		t.Fatalf("PreStartContainer in cdi mode: %v", err)
	}
}

func TestPreStartContainer(t *testing.T) {
	n := start(t, setup{rows: eight()})
	preStart := func() error {
		_, err := n.client.PreStartContainer(context.Background(), &pluginapi.PreStartContainerRequest{DevicesIds: []string{"lpu0", "lpu1"}})
		return err
	}
	mustRefuse := func(t *testing.T, detail string) {
		t.Helper()
		err := preStart()
		if err == nil {
			t.Fatal("PreStartContainer allowed a start without the injector")
		}
		if !strings.Contains(err.Error(), RefusalMessage) || !strings.Contains(err.Error(), detail) {
			t.Fatalf("error %q: want %q and %q", err, RefusalMessage, detail)
		}
	}
	t.Run("no readiness socket", func(t *testing.T) { mustRefuse(t, ready.SocketName) })

	srv, err := ready.Listen(ready.Path(n.state))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	t.Run("injector disconnected", func(t *testing.T) { mustRefuse(t, "lpu-nri reports it is not connected") })
	srv.Set(true)
	t.Run("injector connected", func(t *testing.T) {
		if err := preStart(); err != nil {
			t.Fatalf("PreStartContainer: %v", err)
		}
	})
	srv.Set(false)
	t.Run("injector disconnected again", func(t *testing.T) { mustRefuse(t, "not connected") })
}

func BenchmarkGetPreferredAllocation(b *testing.B) {
	n := start(b, setup{rows: twoRings()})
	req := &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{
		AvailableDeviceIDs: []string{"lpu0", "lpu1", "lpu3", "lpu4", "lpu5", "lpu6", "lpu9", "lpu10", "lpu11", "lpu12", "lpu13"},
		AllocationSize:     4,
	}}}
	ctx := context.Background()
	b.ResetTimer()
	for b.Loop() {
		if _, err := n.client.GetPreferredAllocation(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAllocate(b *testing.B) {
	for _, mode := range []string{config.InjectionNRI, config.InjectionCDI} {
		b.Run(mode, func(b *testing.B) {
			n := start(b, setup{rows: twoRings(), injection: mode})
			req := &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{
				DevicesIds: []string{"lpu5", "lpu3", "lpu4", "lpu6"},
			}}}
			ctx := context.Background()
			b.ResetTimer()
			for b.Loop() {
				if _, err := n.client.Allocate(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkHandlers measures the plugin's own work per call, without gRPC
// and the socket, to separate it from the round trip above.
func BenchmarkHandlers(b *testing.B) {
	n := start(b, setup{rows: twoRings()})
	pref := &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{
		AvailableDeviceIDs: []string{"lpu0", "lpu1", "lpu3", "lpu4", "lpu5", "lpu6", "lpu9", "lpu10", "lpu11", "lpu12", "lpu13"},
		AllocationSize:     4,
	}}}
	alloc := &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{
		DevicesIds: []string{"lpu5", "lpu3", "lpu4", "lpu6"},
	}}}
	b.Run("preferred", func(b *testing.B) {
		for b.Loop() {
			n.plugin.preferred(pref)
		}
	})
	b.Run("allocate-nri", func(b *testing.B) {
		for b.Loop() {
			if _, err := n.plugin.allocate(context.Background(), alloc); err != nil {
				b.Fatal(err)
			}
		}
	})
	cdiNode := start(b, setup{rows: twoRings(), injection: config.InjectionCDI})
	b.Run("allocate-cdi", func(b *testing.B) {
		for b.Loop() {
			if _, err := cdiNode.plugin.allocate(context.Background(), alloc); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// FuzzRequests feeds arbitrary kubelet requests (device ID lists, sizes)
// to Allocate and GetPreferredAllocation. Invariants: preferred never
// fails and answers nothing or exactly size distinct healthy available
// IDs; Allocate succeeds only for known, healthy, distinct IDs, and then
// seals exactly those IDs.
func FuzzRequests(f *testing.F) {
	n := start(f, setup{rows: twoRings(), policy: config.PolicyBestEffort})
	devicetest.SetStatus(f, n.root, "lpu5", "ECC_ERROR")
	daemontest.Eventually(f, 2*time.Second, "lpu5 unhealthy", func() bool {
		snap, _ := n.plugin.src.Snapshot()
		d, _ := snap.Inventory.Device("lpu5")
		return !d.Health.Healthy
	})
	for _, seed := range []struct {
		ids  string
		size int
	}{{"lpu0,lpu1", 2}, {"lpu7,lpu8", 1}, {"lpu5", 1}, {"lpu1,lpu1", 2}, {"", 0}, {"lpu99,gpu0", 3}, {"lpu0,lpu2,lpu4,lpu6", 3}} {
		f.Add(seed.ids, seed.size)
	}
	f.Fuzz(func(t *testing.T, list string, size int) {
		ids := strings.Split(list, ",")
		if list == "" {
			ids = nil
		}
		size = size % 20
		resp := n.plugin.preferred(&pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{
			AvailableDeviceIDs: ids, AllocationSize: int32(size),
		}}})
		got := resp.ContainerResponses[0].DeviceIDs
		if len(got) != 0 && len(got) != size {
			t.Fatalf("preferred(%q, %d) = %v: wrong size", ids, size, got)
		}
		seen := map[string]bool{}
		for _, id := range got {
			if seen[id] || !slices.Contains(ids, id) || id == "lpu5" {
				t.Fatalf("preferred(%q, %d) = %v: %s duplicate, unavailable or unhealthy", ids, size, got, id)
			}
			seen[id] = true
		}

		aresp, err := n.plugin.allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}})
		if err != nil {
			return
		}
		sealed, err := n.key.Open(aresp.ContainerResponses[0].Annotations)
		if err != nil {
			t.Fatalf("allocate(%q): unsealed answer: %v", ids, err)
		}
		if len(sealed) != len(ids) {
			t.Fatalf("allocate(%q) sealed %v", ids, sealed)
		}
		for _, id := range ids {
			if !slices.Contains(sealed, id) {
				t.Fatalf("allocate(%q) sealed %v without %s", ids, sealed, id)
			}
			if id == "lpu5" {
				t.Fatalf("allocate(%q) accepted the unhealthy lpu5", ids)
			}
		}
	})
}

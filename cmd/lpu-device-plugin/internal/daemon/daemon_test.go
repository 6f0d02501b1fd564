package daemon

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/hyperaccel/lpu-node/config"
	"github.com/hyperaccel/lpu-node/internal/daemontest"
	"github.com/hyperaccel/lpu-node/internal/kubelettest"
	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/device/devicesim"
	"github.com/hyperaccel/lpu-node/pkg/inject"
)

type daemon struct {
	state, kdir, metrics, nfdFile string
	kubelet                       *kubelettest.Kubelet
	cancel                        context.CancelFunc
	done                          chan error
}

// simRoot is where the tests write the simulated node under a state dir.
func simRoot(state string) string { return filepath.Join(state, "simulated-node") }

// startDaemon runs the whole daemon on a simulated node of n LPUs with the
// CLI args given, against a test kubelet.
func startDaemon(t *testing.T, n int, args ...string) *daemon {
	t.Helper()
	return startDaemonWith(t, n, nil, args...)
}

// startDaemonWith is startDaemon with a config file edit.
func startDaemonWith(t *testing.T, n int, edit func(*config.Config), args ...string) *daemon {
	t.Helper()
	d := &daemon{state: daemontest.ShortDir(t), kdir: daemontest.ShortDir(t), metrics: daemontest.FreeAddr(t)}
	d.nfdFile = filepath.Join(t.TempDir(), "features.d", "lpu")
	d.kubelet = kubelettest.Start(t, d.kdir)
	// the node lpu-nri simulate writes, as the chart's init container does
	if err := devicesim.WriteNode(simRoot(d.state), n, ""); err != nil {
		t.Fatal(err)
	}
	args = append([]string{
		"--root", simRoot(d.state), "--state-dir", d.state, "--kubelet-dir", d.kdir,
		"--metrics-addr", d.metrics, "--nfd-features-file", d.nfdFile,
	}, args...)
	opts, err := Parse(args, func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(opts.ConfigFile)
	if err != nil {
		t.Fatal(err)
	}
	cfg.NRI.Socket = filepath.Join(d.state, "no-nri.sock")
	cfg.Kubelet.PodResourcesSocket = filepath.Join(d.kdir, "pod-resources.sock")
	cfg.Health.ProbeInterval = config.Duration{Duration: 20 * time.Millisecond}
	if edit != nil {
		edit(cfg)
	}
	if err := opts.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	d.cancel, d.done = cancel, make(chan error, 1)
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
	t.Setenv("NODE_NAME", "node-a") // as the chart sets it
	go func() {
		d.done <- Run(ctx, Params{Config: cfg, Options: opts.Options, Logger: log, Version: "test"})
	}()
	t.Cleanup(func() { d.stop(t) })
	return d
}

func (d *daemon) stop(t *testing.T) {
	if d.cancel == nil {
		return
	}
	d.cancel()
	d.cancel = nil
	select {
	case err := <-d.done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Error("Run did not return after cancel")
	}
}

func TestDaemonSimulatedNode(t *testing.T) {
	d := startDaemon(t, 16, "--injection", "nri")
	reg := d.kubelet.WaitRegistration(t, 5*time.Second)
	if reg.ResourceName != "hyperaccel.ai/lpu" || reg.Endpoint != "lpu.sock" {
		t.Fatalf("registration %+v", reg)
	}
	c := d.kubelet.Dial(t, reg)
	s := c.Watch(t)
	devs := s.Next(t, 2*time.Second)
	if len(devs) != 16 {
		t.Fatalf("%d devices, want 16", len(devs))
	}
	// Simulated NUMA: first half node 0, second half node 1.
	if n := devs[12].GetTopology().GetNodes(); len(n) != 1 || n[0].ID != 1 {
		t.Fatalf("lpu12 topology %v", devs[12].Topology)
	}
	base := "http://" + d.metrics
	daemontest.Eventually(t, 2*time.Second, "/healthz 200", func() bool { code, _ := daemontest.Get(base + "/healthz"); return code == 200 })
	if code, body := daemontest.Get(base + "/readyz"); code != 200 {
		t.Fatalf("/readyz %d %s", code, body)
	}

	// Health flips in the simulated tree reach the stream within a second.
	status := filepath.Join(simRoot(d.state), device.ClassDir, "lpu3", "status")
	if err := os.WriteFile(status, []byte("ECC_ERROR\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s.WaitFor(t, time.Second, "lpu3 Unhealthy", func(l []*pluginapi.Device) bool {
		return kubelettest.Health(l)["lpu3"] == pluginapi.Unhealthy
	})
	_, body := daemontest.Get(base + "/metrics")
	if v := daemontest.Sample(body, "lpu_device_healthy", `device="lpu3"`, `node="node-a"`); v != 0 {
		t.Fatalf("lpu_device_healthy{lpu3} = %v, want 0", v)
	}
	if v := daemontest.Sample(body, "lpu_temperature_celsius", `device="lpu1"`); v <= 0 {
		t.Fatalf("temperature of lpu1 = %v", v)
	}

	// Allocate through the socket: counters move, the answer is sealed.
	before := daemontest.Sample(body, "lpu_allocations_total", `result="contiguous"`)
	resp, err := c.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"lpu9", "lpu8"}}}})
	if err != nil {
		t.Fatal(err)
	}
	key, err := inject.LoadOrCreateKey(d.state)
	if err != nil {
		t.Fatal(err)
	}
	// The seals are bound to NODE_NAME: they open for node-a only.
	if _, err := key.Open(resp.ContainerResponses[0].Annotations); err == nil {
		t.Fatal("seal opens without the node name")
	}
	if key, err = key.ForNode("node-a"); err != nil {
		t.Fatal(err)
	}
	if a, err := key.OpenAllocation(resp.ContainerResponses[0].Annotations); err != nil || strings.Join(a.IDs, ",") != "lpu8,lpu9" {
		t.Fatalf("sealed allocation %+v %v", a, err)
	}
	if _, err := c.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"lpu3"}}}}); err == nil {
		t.Fatal("allocated an unhealthy device")
	}
	_, body = daemontest.Get(base + "/metrics")
	if after := daemontest.Sample(body, "lpu_allocations_total", `result="contiguous"`); after != before+1 {
		t.Fatalf("contiguous allocations %v → %v", before, after)
	}
	if v := daemontest.Sample(body, "lpu_allocations_total", `result="refused"`); v != 1 {
		t.Fatalf("refused allocations = %v, want 1", v)
	}
	if v := daemontest.Sample(body, "lpu_allocate_duration_seconds_count"); v != 2 {
		t.Fatalf("allocate duration count = %v, want 2", v)
	}
	if v := daemontest.Sample(body, "lpu_registrations_total"); v != 1 {
		t.Fatalf("registrations = %v", v)
	}
	if v := daemontest.Sample(body, "lpu_largest_free_arc", `ring="0"`); v != 7 {
		t.Fatalf("largest free arc ring 0 = %v, want 7 (lpu3 unhealthy)", v)
	}

	// PreStartContainer fails closed: no lpu-nri readiness socket.
	if _, err := c.PreStartContainer(context.Background(), &pluginapi.PreStartContainerRequest{DevicesIds: []string{"lpu8"}}); err == nil ||
		!strings.Contains(err.Error(), "LPU injector not connected to the container runtime; refusing to start a container without its LPUs") {
		t.Fatalf("PreStartContainer = %v", err)
	}

	// NFD feature file.
	daemontest.Eventually(t, time.Second, "NFD file", func() bool {
		b, err := os.ReadFile(d.nfdFile)
		return err == nil && strings.Contains(string(b), "hyperaccel.ai/lpu.count=16\n") &&
			strings.Contains(string(b), "hyperaccel.ai/lpu.rings=2\n") && strings.Contains(string(b), "hyperaccel.ai/lpu.largest-ring=8\n") &&
			strings.Contains(string(b), "hyperaccel.ai/lpu.model=HyperAccel-LPU-sim\n")
	})
	// NFD drops the labels an hour after the last write.
	if b, _ := os.ReadFile(d.nfdFile); true {
		head, _, _ := strings.Cut(string(b), "\n")
		until, err := time.Parse(time.RFC3339, strings.TrimPrefix(head, "# +expiry-time="))
		if err != nil || !strings.HasPrefix(head, "# +expiry-time=") || time.Until(until) < 50*time.Minute || time.Until(until) > 61*time.Minute {
			t.Errorf("NFD file starts %q (%v), want an expiry about an hour ahead", head, err)
		}
	}

	// Kubelet restart → re-registration, metrics keep serving meanwhile.
	d.kubelet.Stop() // a kubelet that exits also drops its plugin connections
	s.Close()
	c.Close()
	daemontest.Eventually(t, 2*time.Second, "/healthz 503 without kubelet", func() bool { code, _ := daemontest.Get(base + "/healthz"); return code == 503 })
	if code, _ := daemontest.Get(base + "/metrics"); code != 200 {
		t.Fatalf("/metrics %d without kubelet", code)
	}
	d.kubelet.Restart(t)
	d.kubelet.WaitRegistration(t, time.Second)

	d.stop(t)
	if _, err := os.Stat(filepath.Join(d.kdir, "lpu.sock")); !os.IsNotExist(err) {
		t.Fatalf("plugin socket left behind: %v", err)
	}
}

func TestDaemonAutoInjectionWithoutNRIIsCDI(t *testing.T) {
	d := startDaemon(t, 8)
	reg := d.kubelet.WaitRegistration(t, 5*time.Second)
	c := d.kubelet.Dial(t, reg)
	c.Watch(t).Next(t, 2*time.Second)
	resp, err := c.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"lpu7", "lpu0"}}}})
	if err != nil {
		t.Fatal(err)
	}
	cr := resp.ContainerResponses[0]
	if len(cr.CdiDevices) != 2 || cr.CdiDevices[0].Name != "hyperaccel.ai/lpu=lpu7" || cr.Envs[inject.EnvVisibleDevices] != "7,0" {
		t.Fatalf("cdi response %v", cr)
	}
	if _, err := c.PreStartContainer(context.Background(), &pluginapi.PreStartContainerRequest{}); err != nil {
		t.Fatalf("PreStartContainer in cdi mode: %v", err)
	}
}

// TestDaemonTracingFailsOpen: a collector that is not there never slows or
// fails allocation.
func TestDaemonTracingFailsOpen(t *testing.T) {
	dead := daemontest.FreeAddr(t) // nothing listens here
	d := startDaemonWith(t, 8, func(c *config.Config) {
		c.Tracing = config.Tracing{Endpoint: dead, Insecure: true}
	}, "--injection", "nri")
	c := d.kubelet.Dial(t, d.kubelet.WaitRegistration(t, 5*time.Second))
	for i := range 20 {
		began := time.Now()
		resp, err := c.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"lpu2", "lpu3"}}}})
		if err != nil {
			t.Fatalf("allocate %d with a dead collector: %v", i, err)
		}
		if took := time.Since(began); took > time.Second {
			t.Fatalf("allocate %d took %v with a dead collector", i, took)
		}
		if resp.ContainerResponses[0].Annotations[inject.AnnotationAllocation] == "" {
			t.Fatal("no allocation ID for tracing")
		}
	}
}

package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"

	"github.com/hyperaccel/lpu-node/config"
	"github.com/hyperaccel/lpu-node/internal/daemontest"
	"github.com/hyperaccel/lpu-node/internal/nritest"
	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/device/devicesim"
	"github.com/hyperaccel/lpu-node/pkg/inject"
	"github.com/hyperaccel/lpu-node/pkg/ready"
)

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// code is the status code of addr's path; 0 when it does not answer.
func code(addr, path string) int {
	c, _ := daemontest.Get("http://" + addr + path)
	return c
}

// simulate runs lpu-nri simulate for a node of n LPUs under
// <stateDir>/simulated-node, as the chart's init container does, and
// makes that the root the daemon is given.
func simulate(t *testing.T, cfg *config.Config, n int) {
	t.Helper()
	cfg.Root = filepath.Join(cfg.StateDir, "simulated-node")
	var out bytes.Buffer
	if err := devicesim.WriteNodeTo(&out, cfg.Root, n, cfg.Simulate.Backend); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), fmt.Sprintf("wrote %d LPUs", n)) {
		t.Fatalf("simulate said %q", out.String())
	}
}

func TestRunNRIModeSimulated(t *testing.T) {
	rt := nritest.New(t)
	cfg := config.Default()
	cfg.StateDir = filepath.Join(rt.Dir, "state")
	cfg.NRI.Socket = rt.Socket
	cfg.Metrics.Address = daemontest.FreeAddr(t)
	cfg.Health.ResyncInterval = config.Duration{Duration: 100 * time.Millisecond}
	simulate(t, cfg, 8)
	t.Setenv("NODE_NAME", "node-a") // the node the seals are bound to, as the chart sets it
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Params{Config: cfg, Mode: config.InjectionNRI, Logger: discard})
	}()
	addr := cfg.Metrics.Address

	// No runtime yet: metrics served, not ready, still retrying.
	daemontest.Eventually(t, 10*time.Second, "metrics endpoint", func() bool { return code(addr, "/healthz") == http.StatusOK })
	if got := code(addr, "/readyz"); got != http.StatusServiceUnavailable {
		t.Fatalf("/readyz without runtime = %d, want 503", got)
	}
	if got := daemontest.Scrape(t, addr, "lpu_nri_connected"); got != 0 {
		t.Fatalf("lpu_nri_connected = %v without runtime", got)
	}

	rt.Start(t)
	rt.WaitPlugins(t, 1)
	daemontest.Eventually(t, 10*time.Second, "/readyz 200", func() bool { return code(addr, "/readyz") == http.StatusOK })
	if err := ready.Check(context.Background(), ready.Path(cfg.StateDir)); err != nil {
		t.Fatalf("readiness socket: %v", err)
	}
	if got := daemontest.Scrape(t, addr, "lpu_nri_connected"); got != 1 {
		t.Fatalf("lpu_nri_connected = %v", got)
	}

	// The device plugin seals with the same key file and node name.
	key, err := inject.LoadOrCreateKey(cfg.StateDir)
	if err != nil {
		t.Fatal(err)
	}
	if key, err = key.ForNode("node-a"); err != nil {
		t.Fatal(err)
	}
	ann, err := key.AnnotationsWithID([]string{"lpu6", "lpu7"}, inject.NewAllocationID())
	if err != nil {
		t.Fatal(err)
	}
	pod := &api.PodSandbox{Id: "p1", Name: "trainer", Namespace: "team", Uid: "uid-1"}
	rsp, err := rt.CreateContainer(ctx, pod, &api.Container{Id: "c1", PodSandboxId: "p1", Name: "main",
		Annotations: ann})
	if err != nil {
		t.Fatal(err)
	}
	adj := rsp.GetAdjust()
	var devs []string
	for _, d := range adj.GetLinux().GetDevices() {
		devs = append(devs, fmt.Sprintf("%s %d:%d", d.Path, d.Major, d.Minor))
	}
	if want := fmt.Sprintf("[/dev/lpu6 %d:6 /dev/lpu7 %d:7]", device.DefaultMajor, device.DefaultMajor); fmt.Sprint(devs) != want {
		t.Fatalf("devices %v, want %s", devs, want)
	}
	simLib := filepath.Join(cfg.Root, devicesim.LibDir)
	if ms := adj.GetMounts(); len(ms) != 1 || ms[0].Source != simLib || ms[0].Destination != devicesim.LibDir {
		t.Fatalf("mounts %v, want the simulated %s at %s", ms, simLib, devicesim.LibDir)
	}
	if _, err := rt.CreateContainer(ctx, pod, &api.Container{Id: "c2", PodSandboxId: "p1", Name: "forged",
		Annotations: map[string]string{inject.AnnotationDevices: "lpu0"}}); err == nil {
		t.Fatal("forged annotation accepted")
	}
	for sample, want := range map[string]float64{
		"lpu_nri_injections_total":                        1,
		`lpu_nri_refusals_total{reason="bad-seal"}`:       1,
		`lpu_nri_refusals_total{reason="pod-annotation"}`: 0,
		"lpu_nri_create_container_duration_seconds_count": 2,
		"lpu_nri_connections_total":                       1,
	} {
		if got := daemontest.Scrape(t, addr, sample); got != want {
			t.Errorf("%s = %v, want %v", sample, got, want)
		}
	}

	// Runtime restart: not ready, then ready again.
	rt.Stop()
	daemontest.Eventually(t, 10*time.Second, "/readyz 503 after runtime stop", func() bool { return code(addr, "/readyz") == http.StatusServiceUnavailable })
	rt.Start(t)
	rt.WaitPlugins(t, 1)
	daemontest.Eventually(t, 10*time.Second, "/readyz 200 after restart", func() bool { return code(addr, "/readyz") == http.StatusOK })
	if got := daemontest.Scrape(t, addr, "lpu_nri_connections_total"); got != 2 {
		t.Fatalf("lpu_nri_connections_total = %v after restart, want 2", got)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	if err := ready.Check(context.Background(), ready.Path(cfg.StateDir)); !errors.Is(err, ready.ErrNotConnected) {
		t.Fatalf("readiness after exit = %v", err)
	}
}

func TestRunCDIModeSimulated(t *testing.T) {
	dir := daemontest.ShortDir(t)
	cfg := config.Default()
	cfg.StateDir = filepath.Join(dir, "state")
	cfg.CDI.SpecDir = filepath.Join(dir, "cdi")
	cfg.Metrics.Address = daemontest.FreeAddr(t)
	cfg.Health.ResyncInterval = config.Duration{Duration: 50 * time.Millisecond}
	simulate(t, cfg, 16)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Params{Config: cfg, Mode: config.InjectionCDI, Logger: discard})
	}()
	addr := cfg.Metrics.Address
	spec := filepath.Join(cfg.CDI.SpecDir, inject.SpecFileName)
	daemontest.Eventually(t, 10*time.Second, "spec written and ready", func() bool {
		_, err := os.Stat(spec)
		return err == nil && code(addr, "/readyz") == http.StatusOK
	})
	// Several rescans of the unchanged node happen (counted, so a slow
	// runner cannot pass this before any rescan ran), and none rewrites.
	rescans := func() float64 { return daemontest.Scrape(t, addr, "lpu_nri_cdi_rescans_total") }
	after := rescans()
	daemontest.Eventually(t, 10*time.Second, "three more rescans", func() bool { return rescans() >= after+3 })
	if got := daemontest.Scrape(t, addr, "lpu_nri_cdi_spec_writes_total"); got != 1 {
		t.Fatalf("spec writes = %v after rescans of an unchanged node, want 1", got)
	}
	// The driver is upgraded: the spec follows.
	if err := os.WriteFile(filepath.Join(cfg.Root, device.ModuleVersion), []byte("3.0.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	daemontest.Eventually(t, 10*time.Second, "spec rewritten with the new driver version", func() bool {
		b, _ := os.ReadFile(spec)
		return bytes.Contains(b, []byte("3.0.0"))
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(spec); err != nil {
		t.Fatalf("spec removed on exit: %v (it should stay)", err)
	}
}

func TestCommands(t *testing.T) {
	dir := daemontest.ShortDir(t)
	cfg := config.Default()
	cfg.StateDir = filepath.Join(dir, "state")
	cfg.CDI.SpecDir = filepath.Join(dir, "cdi")
	cfg.NRI.Socket = filepath.Join(dir, "none.sock")
	cfg.Kubelet.DevicePluginDir = filepath.Join(dir, "kubelet") // not the host's
	simulate(t, cfg, 16)
	p := Params{Config: cfg, Mode: config.InjectionCDI, ModeReason: "cdi (test)", Logger: discard}
	ctx := context.Background()

	var out bytes.Buffer
	if err := CDIList(ctx, p, &out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 17 || lines[0] != "hyperaccel.ai/lpu=lpu0" || lines[16] != "hyperaccel.ai/lpu=all" {
		t.Fatalf("cdi list:\n%s", out.String())
	}
	for i, want := range []string{"wrote", "unchanged"} {
		out.Reset()
		if err := CDIGenerate(ctx, p, &out); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(out.String(), want+" ") {
			t.Fatalf("generate #%d: %q, want %s", i, out.String(), want)
		}
	}
	out.Reset()
	failed, err := Doctor(ctx, p, filepath.Join(dir, "plugins"), &out)
	if err != nil {
		t.Fatal(err)
	}
	// No seal key and no device plugin: doctor must fail, naming both.
	if !failed || !strings.Contains(out.String(), "FAIL seal key") || !strings.Contains(out.String(), "FAIL device plugin socket") ||
		!strings.Contains(out.String(), "OK   mode: cdi (test)") || !strings.Contains(out.String(), "OK   CDI spec") {
		t.Fatalf("doctor (failed=%v):\n%s", failed, out.String())
	}
}

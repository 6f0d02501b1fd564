package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	oci "github.com/opencontainers/runtime-spec/specs-go"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/guard"
	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/verify/verifytest"
	"github.com/hyperaccel/lpu-node/internal/nritest"
	"github.com/hyperaccel/lpu-node/pkg/inject"
)

// TestMain lets the test binary stand in for lpu-nri as the guard's hook:
// the CDI spec names it, and the runtime side below runs it as runc would.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == guard.Command {
		os.Exit(guard.Main(os.Args[2:], os.Stdin, os.Stderr))
	}
	os.Exit(m.Run())
}

// freezer is a PodResources check that, once frozen, stalls past the
// runtime's plugin timeout, as a lpu-nri stopped by SIGSTOP does.
type freezer struct{ frozen atomic.Bool }

func (f *freezer) Check(context.Context, string, string, string, []string) error {
	if f.frozen.Load() {
		time.Sleep(time.Second)
	}
	return nil
}

// guardNode is the runtime side of one node with the guard on: a real NRI
// adaptation that reports itself as containerd 1.7 (so lpu-nri subscribes
// without the validator, as there), the guard's CDI spec written by
// package guard and resolved by the CDI library, and the hook run as runc
// runs a createRuntime hook.
type guardNode struct {
	rt     *nritest.Runtime
	state  string
	bundle string
	cache  *cdi.Cache
}

func newGuardNode(t *testing.T) (*guardNode, *inject.Key) {
	t.Helper()
	g := &guardNode{state: t.TempDir(), bundle: t.TempDir()}
	disk, err := inject.LoadOrCreateKey(g.state)
	if err != nil {
		t.Fatal(err)
	}
	key, err := disk.ForNode(verifytest.NodeName)
	if err != nil {
		t.Fatal(err)
	}
	cdiDir := t.TempDir()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := guard.WriteSpec(cdiDir, exe, g.state); err != nil {
		t.Fatal(err)
	}
	if g.cache, err = cdi.NewCache(cdi.WithSpecDirs(cdiDir), cdi.WithAutoRefresh(false)); err != nil {
		t.Fatal(err)
	}
	g.rt = nritest.New(t)
	g.rt.Name, g.rt.Version = "containerd", "v1.7.35"
	g.rt.Start(t)
	return g, key
}

// create makes the container as containerd does: the pristine spec with
// the device plugin's annotations and the guard device from CDI, then
// NRI's CreateContainer and its adjustment applied. It returns the spec.
func (g *guardNode) create(t *testing.T, id string, ann map[string]string) *oci.Spec {
	t.Helper()
	spec := &oci.Spec{Version: oci.Version, Process: &oci.Process{}, Linux: &oci.Linux{}, Annotations: map[string]string{}}
	for k, v := range ann {
		spec.Annotations[k] = v
	}
	if _, err := g.cache.InjectDevices(spec, inject.GuardDevice); err != nil {
		t.Fatalf("CDI: inject %s: %v", inject.GuardDevice, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c := &api.Container{Id: id, PodSandboxId: "pod-g", Name: id, Annotations: ann, Hooks: api.FromOCIHooks(spec.Hooks)}
	rsp, err := g.rt.CreateContainer(ctx, pod("g", nil), c)
	if err != nil {
		t.Fatalf("NRI CreateContainer %s: %v", id, err)
	}
	adj := rsp.GetAdjust()
	for k, v := range adj.GetAnnotations() {
		spec.Annotations[k] = v
	}
	for _, d := range adj.GetLinux().GetDevices() {
		spec.Linux.Devices = append(spec.Linux.Devices, oci.LinuxDevice{Path: d.GetPath(), Type: d.GetType(), Major: d.GetMajor(), Minor: d.GetMinor()})
	}
	return spec
}

// start runs the spec's createRuntime hooks as runc does before the
// container's process exists: the state on stdin, the hook's timeout. It
// returns the first failure with the hook's stderr, and how long it took.
func (g *guardNode) start(t *testing.T, id string, spec *oci.Spec) (time.Duration, error) {
	t.Helper()
	if spec.Hooks == nil || len(spec.Hooks.CreateRuntime) == 0 {
		t.Fatalf("%s: the CDI guard device gave no createRuntime hook: %+v", id, spec.Hooks)
	}
	data, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(g.bundle, "config.json"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	st, _ := json.Marshal(oci.State{Version: oci.Version, ID: id, Status: oci.StateCreating, Pid: os.Getpid(), Bundle: g.bundle, Annotations: spec.Annotations})
	begin := time.Now()
	for _, h := range spec.Hooks.CreateRuntime {
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(*h.Timeout)*time.Second)
		cmd := exec.CommandContext(ctx, h.Path)
		cmd.Args = h.Args
		cmd.Stdin = bytes.NewReader(st)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		cancel()
		if err != nil {
			return time.Since(begin), &hookError{err: err, stderr: strings.TrimSpace(stderr.String())}
		}
	}
	return time.Since(begin), nil
}

type hookError struct {
	err    error
	stderr string
}

func (e *hookError) Error() string { return e.err.Error() + ": " + e.stderr }

func specLPUNodes(spec *oci.Spec) int {
	n := 0
	for _, d := range spec.Linux.Devices {
		if strings.HasPrefix(d.Path, "/dev/lpu") {
			n++
		}
	}
	return n
}

// TestRuntimeGuard is the containerd 1.7 gap and its guard, over the real
// NRI adaptation and the real CDI library: a lpu-nri frozen past the
// plugin timeout is closed by NRI and, with no validator, the container is
// created bare (no LPU nodes); the guard's hook then refuses to start it.
// Healthy, the same hook lets the container start, in milliseconds; a
// proof copied from another container, or a lpu-nri that is not
// connected at all, are refused too.
func TestRuntimeGuard(t *testing.T) {
	nritest.SetRequestTimeout(t, 300*time.Millisecond)
	g, key := newGuardNode(t)
	fr := &freezer{}
	f := newFixture(t, 8, false, func(c *Config) { c.Key = key; c.Check = fr })
	f.connect(t, g.rt)
	g.rt.WaitPlugins(t, 1)

	healthy := g.create(t, "ctr-healthy", seal(t, key, "lpu2", "lpu3"))
	if n := specLPUNodes(healthy); n != 2 {
		t.Fatalf("healthy: %d LPU nodes in the spec, want 2: %+v", n, healthy.Linux.Devices)
	}
	took, err := g.start(t, "ctr-healthy", healthy)
	if err != nil {
		t.Fatalf("healthy: the guard refused a container lpu-nri verified: %v", err)
	}
	// the process (here the test binary, slow to start under -race) must
	// end well inside the timeout runc gives it; the check itself in
	// milliseconds
	if took > time.Duration(guard.HookTimeout)*time.Second/2 {
		t.Errorf("healthy: the hook took %v; runc gives it %ds", took, guard.HookTimeout)
	}
	st, _ := json.Marshal(oci.State{ID: "ctr-healthy", Annotations: healthy.Annotations})
	begin := time.Now()
	if err := guard.Check(bytes.NewReader(st), g.state); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(begin); d > 500*time.Millisecond {
		t.Errorf("guard.Check took %v", d)
	}
	t.Logf("healthy: 2 LPU nodes, hook process passed in %v, the check in %v", took, time.Since(begin))

	// the same proof in a container of another ID (a replayed spec)
	if _, err := g.start(t, "ctr-other", healthy); err == nil || !strings.Contains(err.Error(), "not this node's proof") {
		t.Errorf("copied proof: hook err = %v, want a refusal naming the proof", err)
	}

	fr.frozen.Store(true)
	bare := g.create(t, "ctr-frozen", seal(t, key, "lpu4", "lpu5"))
	if n := specLPUNodes(bare); n != 0 {
		t.Fatalf("frozen: %d LPU nodes; the adaptation should have dropped lpu-nri's late answer", n)
	}
	took, err = g.start(t, "ctr-frozen", bare)
	if err == nil {
		t.Fatal("frozen: the container NRI created without lpu-nri (no LPU nodes) would start bare: the guard let it")
	}
	if !strings.Contains(err.Error(), "no "+inject.AnnotationVerified) {
		t.Errorf("frozen: refusal %q does not say why", err)
	}
	t.Logf("frozen: created bare, hook refused in %v: %v", took, err)
	if took > time.Duration(guard.HookTimeout)*time.Second/2 {
		t.Errorf("frozen: the hook took %v", took)
	}
}

// TestRuntimeGuardNoPlugin: with lpu-nri not connected at all the runtime
// creates the container unadjusted, and the hook refuses it.
func TestRuntimeGuardNoPlugin(t *testing.T) {
	g, key := newGuardNode(t)
	spec := g.create(t, "ctr-down", seal(t, key, "lpu0"))
	if _, err := g.start(t, "ctr-down", spec); err == nil {
		t.Fatal("lpu-nri down: the guard let an unverified container start")
	}
}

// TestRuntimeGuardMissingHook: with the guard on, a verified container
// whose pristine spec lacks the guard's hook (CDI off in the runtime) is
// still served, and logged at warn; one with the hook is not.
func TestRuntimeGuardMissingHook(t *testing.T) {
	var logs bytes.Buffer
	f := newFixture(t, 8, false, func(c *Config) {
		c.RuntimeGuard = true
		c.Log = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	})
	hooked := &api.Hooks{CreateRuntime: []*api.Hook{{Path: "/var/lib/lpu/bin/lpu-nri", Args: []string{"lpu-nri", guard.Command, "--state-dir", "/var/lib/lpu"}}}}
	for _, tc := range []struct {
		hooks *api.Hooks
		warn  bool
	}{{nil, true}, {hooked, false}} {
		logs.Reset()
		c := ctr("m", seal(t, f.key, "lpu1"))
		c.Hooks = tc.hooks
		adj, _, err := f.p.CreateContainer(context.Background(), pod("m", nil), c)
		if err != nil || len(adj.GetLinux().GetDevices()) != 1 {
			t.Fatalf("hooks %v: CreateContainer = %v, %v; want the LPU injected", tc.hooks, adj, err)
		}
		if got := strings.Contains(logs.String(), "no guard hook"); got != tc.warn {
			t.Errorf("hooks %v: warned %v, want %v (log %q)", tc.hooks, got, tc.warn, logs.String())
		}
	}
}

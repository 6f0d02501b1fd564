package nritest

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
	nrilog "github.com/containerd/nri/pkg/log"

	"github.com/hyperaccel/lpu-node/internal/daemontest"
)

// Runtime is a fake container runtime around a real NRI adaptation.
type Runtime struct {
	Dir       string // short temp dir holding the socket and plugin dir
	Socket    string // Dir/nri.sock, where plugins connect
	PluginDir string // Dir/plugins: pre-installed plugins (none by default)
	// Name and Version are the runtime's name and version plugins see at
	// Configure (default "nritest" "v0.0.1", which lpu-nri treats as
	// current): "containerd" "v1.7.35" makes lpu-nri subscribe as it does
	// on a runtime without NRI validators. Set them before Start.
	Name, Version string

	mu      sync.Mutex // guards r, ln, conns, plugins, changed
	r       *adaptation.Adaptation
	ln      net.Listener
	conns   map[net.Conn]bool
	objMu   sync.Mutex // guards pods, ctrs (read by sync while Start runs)
	pods    map[string]*api.PodSandbox
	ctrs    map[string]*api.Container
	plugins int
	changed chan struct{}
}

// New returns a stopped runtime in a new short directory under /tmp,
// removed when the test ends. It silences NRI's global logger.
func New(t testing.TB) *Runtime {
	t.Helper()
	dir := daemontest.ShortDir(t)
	quietOnce.Do(func() { nrilog.Set(quiet{}) })
	rt := &Runtime{
		Dir:       dir,
		Socket:    filepath.Join(dir, "nri.sock"),
		PluginDir: filepath.Join(dir, "plugins"),
		pods:      map[string]*api.PodSandbox{},
		ctrs:      map[string]*api.Container{},
		changed:   make(chan struct{}),
	}
	t.Cleanup(rt.Stop)
	return rt
}

// Start creates and starts the adaptation: it listens on Socket.
func (rt *Runtime) Start(t testing.TB) {
	t.Helper()
	if err := rt.start(); err != nil {
		t.Fatal(err)
	}
}

func (rt *Runtime) start() error {
	rt.mu.Lock()
	running := rt.r != nil
	rt.mu.Unlock()
	if running {
		return fmt.Errorf("nritest: runtime already started")
	}
	name, version := rt.Name, rt.Version
	if name == "" {
		name, version = "nritest", "v0.0.1"
	}
	r, err := adaptation.New(name, version, rt.sync, rt.update,
		adaptation.WithPluginPath(rt.PluginDir),
		adaptation.WithPluginConfigPath(filepath.Join(rt.Dir, "conf.d")),
		adaptation.WithSocketPath(filepath.Join(rt.Dir, "inner.sock")),
		adaptation.WithMetrics(counter{rt}),
	)
	if err != nil {
		return fmt.Errorf("nritest: new adaptation: %w", err)
	}
	if err := r.Start(); err != nil {
		return fmt.Errorf("nritest: start adaptation: %w", err)
	}
	_ = os.Remove(rt.Socket)
	ln, err := net.Listen("unix", rt.Socket)
	if err != nil {
		r.Stop()
		return fmt.Errorf("nritest: %w", err)
	}
	rt.mu.Lock()
	rt.r, rt.ln, rt.conns = r, ln, map[net.Conn]bool{}
	rt.mu.Unlock()
	go rt.accept(ln, filepath.Join(rt.Dir, "inner.sock"))
	return nil
}

// accept relays plugin connections on Socket to the adaptation's own
// socket. The adaptation's Stop leaves external plugin connections open (a
// real runtime exits, which closes them); relaying lets Stop close them.
func (rt *Runtime) accept(ln net.Listener, inner string) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("unix", inner)
		if err != nil {
			c.Close()
			continue
		}
		rt.mu.Lock()
		if rt.conns == nil {
			rt.mu.Unlock()
			c.Close()
			up.Close()
			return
		}
		rt.conns[c], rt.conns[up] = true, true
		rt.mu.Unlock()
		go relay(c, up)
		go relay(up, c)
	}
}

func relay(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	dst.Close()
	src.Close()
}

// Stop stops the adaptation and closes its socket and every plugin
// connection, like a runtime that exits. Safe to call twice.
func (rt *Runtime) Stop() {
	rt.mu.Lock()
	r, ln, conns := rt.r, rt.ln, rt.conns
	rt.r, rt.ln, rt.conns = nil, nil, nil
	rt.mu.Unlock()
	if ln != nil {
		ln.Close()
	}
	for c := range conns {
		c.Close()
	}
	if r != nil {
		r.Stop()
	}
	_ = os.Remove(rt.Socket)
	rt.setPlugins(0)
}

// AddPod records a pod the runtime reports in Synchronize.
func (rt *Runtime) AddPod(p *api.PodSandbox) {
	rt.objMu.Lock()
	defer rt.objMu.Unlock()
	rt.pods[p.GetId()] = p
}

// AddContainer records a container the runtime reports in Synchronize.
func (rt *Runtime) AddContainer(c *api.Container) {
	rt.objMu.Lock()
	defer rt.objMu.Unlock()
	rt.ctrs[c.GetId()] = c
}

func (rt *Runtime) sync(ctx context.Context, cb adaptation.SyncCB) error {
	rt.objMu.Lock()
	pods := make([]*api.PodSandbox, 0, len(rt.pods))
	for _, p := range rt.pods {
		pods = append(pods, p)
	}
	ctrs := make([]*api.Container, 0, len(rt.ctrs))
	for _, c := range rt.ctrs {
		ctrs = append(ctrs, c)
	}
	rt.objMu.Unlock()
	sort.Slice(pods, func(i, j int) bool { return pods[i].GetId() < pods[j].GetId() })
	sort.Slice(ctrs, func(i, j int) bool { return ctrs[i].GetId() < ctrs[j].GetId() })
	_, err := cb(ctx, pods, ctrs)
	return err
}

func (rt *Runtime) update(context.Context, []*api.ContainerUpdate) ([]*api.ContainerUpdate, error) {
	return nil, nil
}

func (rt *Runtime) adaptation() (*adaptation.Adaptation, error) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.r == nil {
		return nil, fmt.Errorf("nritest: runtime not started")
	}
	return rt.r, nil
}

// CreateContainer relays a CreateContainer request to the plugins, as a
// runtime does inside CRI CreateContainer, and returns the merged response.
func (rt *Runtime) CreateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.CreateContainerResponse, error) {
	r, err := rt.adaptation()
	if err != nil {
		return nil, err
	}
	b := r.BlockPluginSync()
	defer b.Unblock()
	return r.CreateContainer(ctx, &api.CreateContainerRequest{Pod: pod, Container: ctr})
}

// Plugins returns how many plugins are connected and synchronized, as the
// adaptation last reported it.
func (rt *Runtime) Plugins() int {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.plugins
}

// WaitPlugins waits (up to 10s) until n plugins are connected and
// synchronized. The adaptation forgets a plugin that left only while it
// relays a runtime event, so while more than n are counted it relays a
// harmless one (the removal of a pod nobody knows) every 50 ms.
func (rt *Runtime) WaitPlugins(t testing.TB, n int) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	nudge := time.NewTicker(50 * time.Millisecond)
	defer nudge.Stop()
	for {
		rt.mu.Lock()
		got, ch, r := rt.plugins, rt.changed, rt.r
		rt.mu.Unlock()
		if got == n {
			return
		}
		select {
		case <-ch:
		case <-nudge.C:
			if got > n && r != nil {
				_ = r.RemovePodSandbox(context.Background(), &api.RemovePodSandboxRequest{Pod: &api.PodSandbox{Id: "nritest-nudge", Uid: "nritest-nudge"}})
			}
		case <-deadline:
			t.Fatalf("nritest: %d plugins connected after 10s, want %d", got, n)
		}
	}
}

func (rt *Runtime) setPlugins(n int) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.plugins = n
	close(rt.changed)
	rt.changed = make(chan struct{})
}

// counter implements adaptation.Metrics to learn the plugin count.
type counter struct{ rt *Runtime }

func (c counter) RecordPluginInvocation(string, string, error)      {}
func (c counter) RecordPluginLatency(string, string, time.Duration) {}
func (c counter) UpdatePluginCount(n int)                           { c.rt.setPlugins(n) }
func (c counter) RecordPluginAdjustments(string, string, *api.ContainerAdjustment, int, int) {
}

var quietOnce sync.Once

// quiet drops NRI's own log output; tests assert behaviour instead.
type quiet struct{}

func (quiet) Debugf(context.Context, string, ...any) {}
func (quiet) Infof(context.Context, string, ...any)  {}
func (quiet) Warnf(context.Context, string, ...any)  {}
func (quiet) Errorf(context.Context, string, ...any) {}

// StartContainer relays a StartContainer event, as a runtime does once the
// container (with its final devices) runs.
func (rt *Runtime) StartContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	r, err := rt.adaptation()
	if err != nil {
		return err
	}
	return r.StartContainer(ctx, &api.StartContainerRequest{Pod: pod, Container: ctr})
}

// StopContainer relays a StopContainer request.
func (rt *Runtime) StopContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	r, err := rt.adaptation()
	if err != nil {
		return err
	}
	_, err = r.StopContainer(ctx, &api.StopContainerRequest{Pod: pod, Container: ctr})
	return err
}

// StopPodSandbox relays a StopPodSandbox event, as a runtime does when the
// kubelet stops a pod (it finished, or is being deleted).
func (rt *Runtime) StopPodSandbox(ctx context.Context, pod *api.PodSandbox) error {
	r, err := rt.adaptation()
	if err != nil {
		return err
	}
	return r.StopPodSandbox(ctx, &api.StopPodSandboxRequest{Pod: pod})
}

// SetRequestTimeout sets the adaptation's per-request plugin timeout (a
// process-wide NRI setting, 2s by default) until the test ends.
func SetRequestTimeout(t testing.TB, d time.Duration) {
	t.Helper()
	adaptation.SetPluginRequestTimeout(d)
	t.Cleanup(func() { adaptation.SetPluginRequestTimeout(adaptation.DefaultPluginRequestTimeout) })
}

// RemovePodSandbox relays a RemovePodSandbox event, as a runtime does when
// the kubelet removes a stopped sandbox (the pod was deleted, or the
// kubelet made it a new one).
func (rt *Runtime) RemovePodSandbox(ctx context.Context, pod *api.PodSandbox) error {
	r, err := rt.adaptation()
	if err != nil {
		return err
	}
	return r.RemovePodSandbox(ctx, &api.RemovePodSandboxRequest{Pod: pod})
}

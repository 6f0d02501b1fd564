package prom

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
	nrilog "github.com/containerd/nri/pkg/log"
)

// quietNRI keeps the adaptation's own logging out of the test output (a
// failure prints the daemons' log tails instead); errors still show.
type quietNRI struct{}

func (quietNRI) Debugf(context.Context, string, ...any) {}
func (quietNRI) Infof(context.Context, string, ...any)  {}
func (quietNRI) Warnf(context.Context, string, ...any)  {}
func (quietNRI) Errorf(ctx context.Context, f string, args ...any) {
	slog.ErrorContext(ctx, "nri adaptation: "+fmt.Sprintf(f, args...))
}

var quietOnce sync.Once

// nriRuntime is the container runtime's side of NRI, the real adaptation
// containerd and CRI-O embed, serving lpu-nri on socket. It relays plugin
// connections through its own listener so that stop drops them, as a
// runtime that exits does (the adaptation's Stop leaves external plugin
// connections open).
type nriRuntime struct {
	socket, dir string
	mu          sync.Mutex
	a           *adaptation.Adaptation
	ln          net.Listener
	conns       []net.Conn
}

// startRuntime starts the adaptation; lpu-nri connects to socket.
func startRuntime(t *testing.T, dir, socket string) *nriRuntime {
	t.Helper()
	quietOnce.Do(func() { nrilog.Set(quietNRI{}) })
	rt := &nriRuntime{socket: socket, dir: dir}
	if err := rt.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.stop)
	return rt
}

func (rt *nriRuntime) start() error {
	inner := filepath.Join(rt.dir, "inner.sock")
	a, err := adaptation.New("lpu-prom-test", "v0.0.1",
		func(ctx context.Context, cb adaptation.SyncCB) error { _, err := cb(ctx, nil, nil); return err },
		func(context.Context, []*api.ContainerUpdate) ([]*api.ContainerUpdate, error) { return nil, nil },
		adaptation.WithPluginPath(filepath.Join(rt.dir, "plugins")),
		adaptation.WithPluginConfigPath(filepath.Join(rt.dir, "conf.d")),
		adaptation.WithSocketPath(inner))
	if err != nil {
		return err
	}
	if err := a.Start(); err != nil {
		return err
	}
	_ = os.Remove(rt.socket)
	ln, err := net.Listen("unix", rt.socket)
	if err != nil {
		a.Stop()
		return err
	}
	rt.mu.Lock()
	rt.a, rt.ln = a, ln
	rt.mu.Unlock()
	go rt.relay(ln, inner)
	return nil
}

// relay connects each plugin connection on ln to the adaptation's socket.
func (rt *nriRuntime) relay(ln net.Listener, inner string) {
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
		rt.conns = append(rt.conns, c, up)
		rt.mu.Unlock()
		go func() { _, _ = io.Copy(up, c); up.Close() }()
		go func() { _, _ = io.Copy(c, up); c.Close() }()
	}
}

// stop stops the runtime and drops every plugin connection; safe twice.
func (rt *nriRuntime) stop() {
	rt.mu.Lock()
	a, ln, conns := rt.a, rt.ln, rt.conns
	rt.a, rt.ln, rt.conns = nil, nil, nil
	rt.mu.Unlock()
	if ln != nil {
		ln.Close()
	}
	for _, c := range conns {
		c.Close()
	}
	if a != nil {
		a.Stop()
	}
	_ = os.Remove(rt.socket)
}

// create runs one CreateContainer through the plugins, as the runtime does
// inside CRI CreateContainer.
func (rt *nriRuntime) create(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.CreateContainerResponse, error) {
	rt.mu.Lock()
	a := rt.a
	rt.mu.Unlock()
	b := a.BlockPluginSync()
	defer b.Unblock()
	return a.CreateContainer(ctx, &api.CreateContainerRequest{Pod: pod, Container: ctr})
}

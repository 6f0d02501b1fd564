package plugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/hyperaccel/lpu-node/internal/logchange"
)

// kubeletSocket is the kubelet's registration socket in its directory.
const kubeletSocket = "kubelet.sock"

// stableAfter is how long a registration must last before a trigger
// re-registers at once instead of backing off.
const stableAfter = 5 * time.Second

// generation is one served socket and registration. The kubelet may drop it
// at any time (restart, stream closed); Run then starts the next one.
type generation struct {
	ctx      context.Context
	cancel   context.CancelFunc
	srv      *grpc.Server
	served   chan struct{}
	socket   string
	id       fileID
	kubelet  fileID // the kubelet.sock registered with
	triggers chan string
}

// trigger asks Run to re-register, giving the reason.
func (g *generation) trigger(reason string) {
	select {
	case g.triggers <- reason:
	default: // one pending reason is enough
	}
}

// intact reports whether the socket file is still the one this generation
// created.
func (g *generation) intact() bool {
	id, err := identify(g.socket)
	return err == nil && id == g.id
}

// stop ends the generation's streams and server and removes its socket file
// when it is still ours.
func (g *generation) stop() {
	g.cancel()
	g.srv.Stop()
	<-g.served
	if g.intact() {
		_ = os.Remove(g.socket)
	}
}

// fileID tells a file from one created later at the same path: inode
// numbers alone are reused at once by some filesystems, so the change time
// is part of it.
type fileID struct {
	ino   uint64
	ctime int64 // nanoseconds
}

func identify(path string) (fileID, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return fileID{}, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}, fmt.Errorf("stat %s: no inode", path)
	}
	return fileID{ino: st.Ino, ctime: st.Ctim.Nano()}, nil
}

// Run serves the plugin socket and keeps the plugin registered with the
// kubelet until ctx ends. It re-registers within a second when kubelet.sock
// is created again, when the plugin's socket is removed (the kubelet deletes
// every socket in its directory on restart) and when the kubelet closes the
// ListAndWatch stream; while the kubelet is absent it retries with bounded
// backoff. It returns nil when ctx ends; nothing else stops it.
func (p *Plugin) Run(ctx context.Context) error {
	dir := p.opts.KubeletDir
	var events <-chan fsnotify.Event
	var watchErrs <-chan error
	w, err := fsnotify.NewWatcher()
	if err != nil {
		p.log.Warn("cannot watch the kubelet directory, relying on retries", "dir", dir, "err", err)
	} else {
		defer w.Close()
		events, watchErrs = w.Events, w.Errors
	}
	watching := false
	wait := p.opts.Backoff.Min
	// backOff waits before the next attempt and doubles the wait, up to
	// Backoff.Max; false when ctx ended.
	backOff := func() bool {
		if !p.sleep(ctx, p.retryDelay(wait), events, &watching) {
			return false
		}
		wait = p.opts.Backoff.Next(wait)
		return true
	}
	var errs logchange.Errors
	reason := "start"
	for {
		if w != nil && !watching {
			if err := w.Add(dir); err == nil {
				watching = true
			}
		}
		gen, err := p.startGeneration(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errs.Note(err) == logchange.Failed {
				p.log.Warn("device plugin not registered, retrying", "err", err, "retryIn", wait.String())
			}
			if !backOff() {
				return nil
			}
			continue
		}
		errs.Note(nil)
		p.registered.Store(true)
		p.rec.Registered()
		p.log.Info("registered with kubelet", "resource", p.opts.ResourceName, "socket", gen.socket, "reason", reason)
		since := time.Now()

		reason = p.waitTrigger(ctx, gen, events, watchErrs, &watching)
		gen.stop()
		p.registered.Store(false)
		if reason == "" {
			return nil
		}
		p.log.Info("re-registering with kubelet", "reason", reason)
		if time.Since(since) >= stableAfter {
			wait = p.opts.Backoff.Min
		} else if !backOff() { // dropped soon after registering: do not spin
			return nil
		}
	}
}

// freshKubelet is how young kubelet.sock must be for retries to stay at the
// shortest delay: a kubelet creates its socket a moment before it accepts
// connections, so the first attempts after a restart are refused, and an
// exponential backoff there would delay re-registration past a second.
const freshKubelet = 10 * time.Second

// retryDelay is the wait before the next registration attempt: the minimum
// while kubelet.sock was created recently (a kubelet starting up), else the
// current backoff (no kubelet, or a stale socket left by a dead one).
func (p *Plugin) retryDelay(wait time.Duration) time.Duration {
	if id, err := identify(p.kubeletSocketPath()); err == nil && time.Since(time.Unix(0, id.ctime)) < freshKubelet {
		return min(wait, p.opts.Backoff.Min)
	}
	return wait
}

// kubeletSocketPath is the path of kubelet.sock.
func (p *Plugin) kubeletSocketPath() string { return filepath.Join(p.opts.KubeletDir, kubeletSocket) }

// checkInterval spaces the fallback checks of both sockets, for when file
// events are lost or unavailable (inotify limits).
const checkInterval = time.Second

// waitTrigger blocks until the registration must be renewed and says why;
// "" means ctx ended.
func (p *Plugin) waitTrigger(ctx context.Context, gen *generation, events <-chan fsnotify.Event, errs <-chan error, watching *bool) string {
	check := time.NewTicker(checkInterval)
	defer check.Stop()
	for {
		select {
		case <-ctx.Done():
			return ""
		case r := <-gen.triggers:
			return r
		case <-check.C:
			if !gen.intact() {
				return "plugin socket removed (periodic check)"
			}
			if id, err := identify(p.kubeletSocketPath()); err == nil && id != gen.kubelet {
				return "kubelet.sock replaced (periodic check)"
			}
		case err, ok := <-errs:
			if ok {
				p.log.Debug("kubelet directory watch error", "err", err)
			}
		case ev, ok := <-events:
			if !ok {
				continue
			}
			if r := p.classify(ev, gen, watching); r != "" {
				return r
			}
		}
	}
}

// classify turns a file event in the kubelet directory into a reason to
// re-register, or "".
func (p *Plugin) classify(ev fsnotify.Event, gen *generation, watching *bool) string {
	dir := filepath.Clean(p.opts.KubeletDir)
	switch {
	case filepath.Clean(ev.Name) == dir && (ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename)):
		*watching = false
		return "kubelet directory removed"
	case filepath.Base(ev.Name) == kubeletSocket && ev.Has(fsnotify.Create):
		// Events queued while re-registering may predate the kubelet.sock
		// we registered with: only a different file means a new kubelet.
		if gen == nil {
			return "kubelet.sock created (kubelet restarted)"
		}
		if id, err := identify(ev.Name); err == nil && id != gen.kubelet {
			return "kubelet.sock created (kubelet restarted)"
		}
	case gen != nil && filepath.Base(ev.Name) == p.socket && (ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename)):
		if !gen.intact() {
			return "plugin socket removed"
		}
	}
	return ""
}

// sleep waits d, or less when kubelet.sock appears; false when ctx ended.
func (p *Plugin) sleep(ctx context.Context, d time.Duration, events <-chan fsnotify.Event, watching *bool) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			if r := p.classify(ev, nil, watching); r != "" && r != "kubelet directory removed" {
				return true
			}
		}
	}
}

// startGeneration serves a fresh socket and registers it with the kubelet.
func (p *Plugin) startGeneration(ctx context.Context) (*generation, error) {
	socket := p.Socket()
	if err := os.Remove(socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("remove stale socket %s: %w", socket, err)
	}
	ln, err := net.Listen("unix", socket)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", socket, err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false) // stop removes it only while it is ours
	id, err := identify(socket)
	if err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("stat %s: %w", socket, err)
	}
	gctx, cancel := context.WithCancel(ctx)
	g := &generation{
		ctx: gctx, cancel: cancel, srv: grpc.NewServer(), served: make(chan struct{}),
		socket: socket, id: id, triggers: make(chan string, 1),
	}
	pluginapi.RegisterDevicePluginServer(g.srv, &service{p: p, gen: g})
	go func() {
		defer close(g.served)
		_ = g.srv.Serve(ln)
	}()
	kid, err := p.register(ctx)
	if err != nil {
		g.stop()
		return nil, err
	}
	g.kubelet = kid
	return g, nil
}

// register calls the kubelet's Registration service and returns the
// identity of the kubelet.sock it reached.
func (p *Plugin) register(ctx context.Context) (fileID, error) {
	sock := p.kubeletSocketPath()
	id, err := identify(sock)
	if err != nil {
		return fileID{}, fmt.Errorf("kubelet registration socket: %w", err)
	}
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fileID{}, fmt.Errorf("dial kubelet %s: %w", sock, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, registerTimeout)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     p.socket,
		ResourceName: p.opts.ResourceName,
		Options:      options(),
	})
	if err != nil {
		return fileID{}, fmt.Errorf("register %s with kubelet %s: %w", p.opts.ResourceName, sock, err)
	}
	return id, nil
}

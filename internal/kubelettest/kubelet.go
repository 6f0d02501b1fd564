package kubelettest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// KubeletSocket is the registration socket's file name in the device-plugin
// directory, as the kubelet names it.
const KubeletSocket = "kubelet.sock"

// Kubelet is the kubelet's Registration service on <dir>/kubelet.sock. It
// records every RegisterRequest and validates it the way the kubelet's device
// manager does (supported API version, non-empty resource and endpoint).
type Kubelet struct {
	// Dir is the device-plugin directory holding kubelet.sock and the
	// plugins' sockets.
	Dir string

	mu    sync.Mutex
	regs  []*pluginapi.RegisterRequest
	regCh chan *pluginapi.RegisterRequest
	srv   *grpc.Server
	done  chan struct{}
}

// registration is the gRPC Registration service backed by a Kubelet.
type registration struct {
	pluginapi.UnimplementedRegistrationServer
	k *Kubelet
}

// Register records the request, as the kubelet's device manager does before
// it dials the plugin's endpoint.
func (r registration) Register(_ context.Context, req *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	if !slices.Contains(pluginapi.SupportedVersions[:], req.GetVersion()) {
		return nil, fmt.Errorf("requested device plugin API version %q is not supported by kubelet, supported versions are %v", req.GetVersion(), pluginapi.SupportedVersions)
	}
	if req.GetResourceName() == "" || req.GetEndpoint() == "" {
		return nil, fmt.Errorf("invalid registration: resource %q endpoint %q", req.GetResourceName(), req.GetEndpoint())
	}
	r.k.mu.Lock()
	r.k.regs = append(r.k.regs, req)
	r.k.mu.Unlock()
	select {
	case r.k.regCh <- req:
	default: // tests that do not wait still see it in Registrations
	}
	return &pluginapi.Empty{}, nil
}

// Start serves the Registration service on <dir>/kubelet.sock until the
// test ends. dir must be short enough for a unix socket path (see ShortDir).
func Start(t testing.TB, dir string) *Kubelet {
	t.Helper()
	k := &Kubelet{Dir: dir, regCh: make(chan *pluginapi.RegisterRequest, 64)}
	if err := k.listen(); err != nil {
		t.Fatalf("start kubelet: %v", err)
	}
	t.Cleanup(k.Stop)
	return k
}

func (k *Kubelet) listen() error {
	path := filepath.Join(k.Dir, KubeletSocket)
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("listen %s: %w", path, err)
	}
	k.serve(ln)
	return nil
}

// serve runs the Registration service on ln until Stop.
func (k *Kubelet) serve(ln net.Listener) {
	srv := grpc.NewServer()
	pluginapi.RegisterRegistrationServer(srv, registration{k: k})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	k.mu.Lock()
	k.srv, k.done = srv, done
	k.mu.Unlock()
}

// Stop stops the Registration service and removes kubelet.sock, as a
// kubelet that exits does.
func (k *Kubelet) Stop() {
	k.mu.Lock()
	srv, done := k.srv, k.done
	k.srv, k.done = nil, nil
	k.mu.Unlock()
	if srv == nil {
		return
	}
	srv.Stop()
	<-done
	_ = os.Remove(filepath.Join(k.Dir, KubeletSocket))
}

// Restart behaves like a kubelet restart: it stops serving, deletes every
// socket in the device-plugin directory (the plugins' too), and creates
// kubelet.sock again.
func (k *Kubelet) Restart(t testing.TB) {
	t.Helper()
	k.Stop()
	k.removeSockets(t)
	if err := k.listen(); err != nil {
		t.Fatalf("restart kubelet: %v", err)
	}
}

// removeSockets deletes every socket in the directory, as a starting
// kubelet does.
func (k *Kubelet) removeSockets(t testing.TB) {
	t.Helper()
	entries, err := os.ReadDir(k.Dir)
	if err != nil {
		t.Fatalf("restart kubelet: %v", err)
	}
	for _, e := range entries {
		if e.Type()&os.ModeSocket != 0 {
			if err := os.Remove(filepath.Join(k.Dir, e.Name())); err != nil {
				t.Fatalf("restart kubelet: %v", err)
			}
		}
	}
}

// RestartListenLater is Restart for a kubelet that is slow to come up: the
// new kubelet.sock exists (bound) at once, but connections are refused until
// it listens, after delay — what a real kubelet does between creating its
// socket and serving on it.
func (k *Kubelet) RestartListenLater(t testing.TB, delay time.Duration) {
	t.Helper()
	k.Stop()
	k.removeSockets(t)
	path := filepath.Join(k.Dir, KubeletSocket)
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("restart kubelet: socket: %v", err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrUnix{Name: path}); err != nil {
		_ = syscall.Close(fd)
		t.Fatalf("restart kubelet: bind %s: %v", path, err)
	}
	time.Sleep(delay)
	if err := syscall.Listen(fd, 16); err != nil {
		_ = syscall.Close(fd)
		t.Fatalf("restart kubelet: listen %s: %v", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	ln, err := net.FileListener(f)
	_ = f.Close() // FileListener holds its own descriptor
	if err != nil {
		t.Fatalf("restart kubelet: %v", err)
	}
	k.serve(ln)
}

// Recreate stops serving and creates kubelet.sock again without touching
// the plugins' sockets: a new kubelet.sock is the only sign of the change.
func (k *Kubelet) Recreate(t testing.TB) {
	t.Helper()
	k.Stop()
	if err := k.listen(); err != nil {
		t.Fatalf("recreate kubelet.sock: %v", err)
	}
}

// Registrations returns every request recorded so far, oldest first.
func (k *Kubelet) Registrations() []*pluginapi.RegisterRequest {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]*pluginapi.RegisterRequest(nil), k.regs...)
}

// WaitRegistration returns the next registration, failing the test when none
// arrives within timeout.
func (k *Kubelet) WaitRegistration(t testing.TB, timeout time.Duration) *pluginapi.RegisterRequest {
	t.Helper()
	select {
	case req := <-k.regCh:
		return req
	case <-time.After(timeout):
		t.Fatalf("no device plugin registration within %v (recorded %d)", timeout, len(k.Registrations()))
		return nil
	}
}

// Dial connects to the endpoint of a registration, as the kubelet does right
// after Register returns.
func (k *Kubelet) Dial(t testing.TB, req *pluginapi.RegisterRequest) *Client {
	t.Helper()
	return Dial(t, filepath.Join(k.Dir, req.GetEndpoint()))
}

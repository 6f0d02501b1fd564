package kubelettest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
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
	if !isSupported(req.GetVersion()) {
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

func isSupported(v string) bool {
	for _, s := range pluginapi.SupportedVersions {
		if s == v {
			return true
		}
	}
	return false
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
	return nil
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
	if err := k.listen(); err != nil {
		t.Fatalf("restart kubelet: %v", err)
	}
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

// ShortDir makes a directory under /tmp whose paths fit unix socket limits
// (108 bytes) and removes it when the test ends.
func ShortDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "lpu")
	if err != nil {
		t.Fatalf("short dir: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// dialUnix returns a gRPC client connection to a unix socket path.
func dialUnix(path string) (*grpc.ClientConn, error) {
	return grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
}

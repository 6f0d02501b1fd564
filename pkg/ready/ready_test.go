package ready

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hyperaccel/lpu-node/internal/daemontest"
)

func TestPath(t *testing.T) {
	if got, want := Path("/var/lib/lpu"), "/var/lib/lpu/nri-ready.sock"; got != want {
		t.Fatalf("Path = %q, want %q", got, want)
	}
}

func TestListenSetCheck(t *testing.T) {
	dir := daemontest.ShortDir(t)
	path := Path(filepath.Join(dir, "state")) // Listen creates the missing state dir
	s, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()

	steps := []struct {
		set     *bool
		wantErr bool
	}{
		{nil, true}, // starts disconnected
		{ptr(true), false},
		{ptr(false), true},
		{ptr(true), false},
	}
	for i, st := range steps {
		if st.set != nil {
			s.Set(*st.set)
			if s.Connected() != *st.set {
				t.Fatalf("step %d: Connected() = %v after Set(%v)", i, s.Connected(), *st.set)
			}
		}
		err := Check(ctx, path)
		if st.wantErr {
			if !errors.Is(err, ErrNotConnected) {
				t.Fatalf("step %d: Check = %v, want ErrNotConnected", i, err)
			}
		} else if err != nil {
			t.Fatalf("step %d: Check = %v, want nil", i, err)
		}
	}
}

func ptr(b bool) *bool { return &b }

func TestCheckErrors(t *testing.T) {
	tests := map[string]struct {
		setup func(t *testing.T, path string)
	}{
		"no socket file": {
			setup: func(*testing.T, string) {},
		},
		"stale socket file, nobody listening": {
			setup: staleSocket,
		},
		"regular file instead of socket": {
			setup: func(t *testing.T, path string) {
				if err := os.WriteFile(path, []byte("connected\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			},
		},
		"server answers garbage": {
			setup: func(t *testing.T, path string) {
				serveLine(t, path, "maybe\n")
			},
		},
		"server closes without answer": {
			setup: func(t *testing.T, path string) {
				serveLine(t, path, "")
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(daemontest.ShortDir(t), SocketName)
			tc.setup(t, path)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			err := Check(ctx, path)
			if !errors.Is(err, ErrNotConnected) {
				t.Fatalf("Check = %v, want an error wrapping ErrNotConnected", err)
			}
		})
	}
}

// staleSocket leaves a socket file at path that nobody listens on, as a
// crashed lpu-nri does.
func staleSocket(t *testing.T, path string) {
	t.Helper()
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("stale socket not left behind: %v", err)
	}
}

// hungSocket returns a socket path whose connections the kernel accepts
// (into the backlog) but nobody ever answers, until the test ends.
func hungSocket(t *testing.T) string {
	t.Helper()
	path := filepath.Join(daemontest.ShortDir(t), SocketName)
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return path
}

// serveLine serves one fixed answer on path until the test ends.
func serveLine(t *testing.T, path, line string) {
	t.Helper()
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte(line))
			c.Close()
		}
	}()
}

func TestCheckHungServerHonoursDeadline(t *testing.T) {
	path := hungSocket(t)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := Check(ctx, path)
	if !errors.Is(err, ErrNotConnected) {
		t.Fatalf("Check = %v, want ErrNotConnected", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Check took %v, want it bounded by the context deadline", d)
	}
}

func TestListenReplacesStaleSocket(t *testing.T) {
	dir := daemontest.ShortDir(t)
	path := Path(dir)
	staleSocket(t, path)

	s, err := Listen(path)
	if err != nil {
		t.Fatalf("Listen over a stale socket: %v", err)
	}
	s.Set(true)
	if err := Check(context.Background(), path); err != nil {
		t.Fatalf("Check after replacing the stale socket = %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close = %v", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket still present after Close: %v", err)
	}
	if err := Check(context.Background(), path); !errors.Is(err, ErrNotConnected) {
		t.Fatalf("Check after Close = %v, want ErrNotConnected", err)
	}
}

func TestListenErrors(t *testing.T) {
	dir := daemontest.ShortDir(t)
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := map[string]string{
		"parent is a file": filepath.Join(file, SocketName),
		"path is a dir":    mkdir(t, filepath.Join(dir, "adir", "sub")),
		"path too long":    filepath.Join(dir, strings.Repeat("a", 120)),
	}
	for name, path := range tests {
		t.Run(name, func(t *testing.T) {
			s, err := Listen(path)
			if err == nil {
				s.Close()
				t.Fatalf("Listen(%q) succeeded, want an error", path)
			}
		})
	}
}

func mkdir(t *testing.T, p string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(p, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCheckDefaultTimeout(t *testing.T) {
	// Without a deadline Check applies its own (one second) rather than hang.
	path := hungSocket(t)
	start := time.Now()
	if err := Check(context.Background(), path); !errors.Is(err, ErrNotConnected) {
		t.Fatalf("Check = %v, want ErrNotConnected", err)
	}
	if d := time.Since(start); d < 500*time.Millisecond || d > 3*time.Second {
		t.Fatalf("Check returned after %v, want about one second", d)
	}
}

func TestConcurrentChecks(t *testing.T) {
	path := Path(daemontest.ShortDir(t))
	s, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.Set(true)
	errc := make(chan error, 50)
	for range 50 {
		go func() { errc <- Check(context.Background(), path) }()
	}
	for range 50 {
		if err := <-errc; err != nil {
			t.Fatalf("concurrent Check = %v", err)
		}
	}
}

// TestCheckRefusesForeignSocket: a socket owned by another uid, or a
// symlink to the real one, is not trusted even when it answers
// "connected". The peer-credential check cannot be exercised without a
// second uid's process; the owner check stands in for a socket planted by
// another user.
func TestCheckRefusesForeignSocket(t *testing.T) {
	dir := daemontest.ShortDir(t)
	path := Path(dir)
	s, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.Set(true)
	if err := Check(context.Background(), path); err != nil {
		t.Fatalf("own socket: %v", err)
	}
	link := filepath.Join(dir, "link.sock")
	if err := os.Symlink(path, link); err != nil {
		t.Fatal(err)
	}
	if err := Check(context.Background(), link); !errors.Is(err, ErrNotConnected) || !strings.Contains(err.Error(), "is not a socket") {
		t.Errorf("symlink: %v, want a not-a-socket refusal", err)
	}
	if os.Geteuid() != 0 {
		t.Skip("chown needs root")
	}
	if err := os.Lchown(path, os.Geteuid()+1000, -1); err != nil {
		t.Fatal(err)
	}
	if err := Check(context.Background(), path); !errors.Is(err, ErrNotConnected) || !strings.Contains(err.Error(), "not trusting it") {
		t.Errorf("socket of another uid: %v, want a refusal", err)
	}
}

// TestLiveCheck: a recorded "connected" is answered only while the live
// check passes at the moment of the answer.
func TestLiveCheck(t *testing.T) {
	path := filepath.Join(daemontest.ShortDir(t), SocketName)
	s, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var dead atomic.Bool
	s.SetLive(func() error {
		if dead.Load() {
			return errors.New("connection closed by the runtime")
		}
		return nil
	})
	s.Set(true)
	if err := Check(context.Background(), path); err != nil {
		t.Fatalf("connected and live: %v", err)
	}
	dead.Store(true)
	if err := Check(context.Background(), path); !errors.Is(err, ErrNotConnected) {
		t.Fatalf("connected but not live: %v, want ErrNotConnected", err)
	}
	s.SetLive(nil)
	if err := Check(context.Background(), path); err != nil {
		t.Fatalf("check removed: %v", err)
	}
	s.Set(false)
	s.SetLive(func() error { return nil })
	if err := Check(context.Background(), path); !errors.Is(err, ErrNotConnected) {
		t.Fatalf("live but not connected: %v, want ErrNotConnected", err)
	}
}

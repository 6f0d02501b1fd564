// Package ready is the readiness signal lpu-nri gives lpu-device-plugin: a
// unix socket under the shared state directory that answers every connection
// with one line, "connected" or "disconnected" (from the container runtime).
//
// The device plugin's PreStartContainer refuses to let a container start
// unless Check returns nil: if lpu-nri is down, the socket is gone or refuses
// connections, and the container would otherwise start without its LPUs.
//
// The answer is proved, not remembered: with SetLive, "connected" is said
// only while the check passes at that moment (lpu-nri: its connection to
// the runtime is still open), so a lpu-nri that was frozen past the
// runtime's timeout does not say "connected" when it thaws.
package ready

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// SocketName is the readiness socket's file name in the state directory.
const SocketName = "nri-ready.sock"

const (
	lineConnected    = "connected"
	lineDisconnected = "disconnected"
)

// ErrNotConnected is returned by Check when lpu-nri runs but is not connected
// to the container runtime.
var ErrNotConnected = errors.New("LPU injector not connected to the container runtime")

// Path returns the readiness socket path for a state directory.
func Path(stateDir string) string { return filepath.Join(stateDir, SocketName) }

// Server serves the readiness socket.
type Server struct {
	ln        net.Listener
	connected atomic.Bool
	live      atomic.Pointer[func() error]
	wg        sync.WaitGroup
}

// Listen creates the readiness socket at path (replacing a stale one) and
// serves it until Close. It starts out disconnected.
func Listen(path string) (*Server, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", filepath.Dir(path), err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("remove stale %s: %w", path, err)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", path, err)
	}
	s := &Server{ln: ln}
	s.wg.Add(1)
	go s.serve()
	return s, nil
}

func (s *Server) serve() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		line := lineDisconnected
		if s.answer() {
			line = lineConnected
		}
		_ = c.SetWriteDeadline(time.Now().Add(time.Second))
		_, _ = c.Write([]byte(line + "\n"))
		_ = c.Close()
	}
}

// answer reports whether to say "connected": the recorded state, proved
// now by the liveness check when there is one. A process that was frozen
// past the runtime's timeout may still record "connected" when it thaws,
// before it has seen the runtime close the connection; the check sees it.
func (s *Server) answer() bool {
	if !s.connected.Load() {
		return false
	}
	if live := s.live.Load(); live != nil {
		return (*live)() == nil
	}
	return true
}

// SetLive sets a check that must pass, at the moment of each answer, for
// the socket to say "connected" (lpu-nri: the NRI connection is still
// open). nil removes it.
func (s *Server) SetLive(check func() error) {
	if check == nil {
		s.live.Store(nil)
		return
	}
	s.live.Store(&check)
}

// Set records whether lpu-nri is connected to the runtime.
func (s *Server) Set(connected bool) { s.connected.Store(connected) }

// Connected reports the recorded state.
func (s *Server) Connected() bool { return s.connected.Load() }

// Close stops serving and removes the socket.
func (s *Server) Close() error {
	err := s.ln.Close() // a unix listener removes its socket file on Close
	s.wg.Wait()
	return err
}

// Check asks the readiness socket at path whether lpu-nri is connected. It
// returns nil only for a "connected" answer; otherwise an error saying why.
// It trusts the socket only when it is a socket (not a symlink) owned by
// this process's effective uid and the process answering runs as that uid
// too (SO_PEERCRED): another local user must not be able to stand in for
// lpu-nri and say "connected".
func Check(ctx context.Context, path string) error {
	if err := checkOwner(path); err != nil {
		return err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Second)
		defer cancel()
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return fmt.Errorf("%w: readiness socket %s: %w", ErrNotConnected, path, err)
	}
	defer c.Close()
	if err := checkPeer(c, path); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetReadDeadline(dl)
	}
	line, err := bufio.NewReader(io.LimitReader(c, 64)).ReadString('\n')
	if err != nil {
		return fmt.Errorf("%w: read %s: %w", ErrNotConnected, path, err)
	}
	switch strings.TrimSpace(line) {
	case lineConnected:
		return nil
	case lineDisconnected:
		return ErrNotConnected
	default:
		return fmt.Errorf("%w: unexpected answer %q from %s", ErrNotConnected, strings.TrimSpace(line), path)
	}
}

// checkOwner refuses a path that is not a socket owned by our euid.
func checkOwner(path string) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return fmt.Errorf("%w: readiness socket %s: %w", ErrNotConnected, path, err)
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("%w: readiness socket %s: mode %v is not a socket", ErrNotConnected, path, fi.Mode())
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		if uid := os.Geteuid(); int(st.Uid) != uid {
			return fmt.Errorf("%w: readiness socket %s is owned by uid %d, not %d: not trusting it", ErrNotConnected, path, st.Uid, uid)
		}
	}
	return nil
}

// checkPeer refuses an answering process of another uid.
func checkPeer(c net.Conn, path string) error {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return nil
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return fmt.Errorf("%w: readiness socket %s: %w", ErrNotConnected, path, err)
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) { cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil {
		credErr = err
	}
	if credErr != nil {
		return fmt.Errorf("%w: readiness socket %s: peer credentials: %w", ErrNotConnected, path, credErr)
	}
	if uid := os.Geteuid(); int(cred.Uid) != uid {
		return fmt.Errorf("%w: readiness socket %s is served by uid %d (pid %d), not %d: not trusting it", ErrNotConnected, path, cred.Uid, cred.Pid, uid)
	}
	return nil
}

package plugin

import (
	"errors"
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// errNotSynchronized is Live's answer before the runtime synchronized the
// plugin on the current connection.
var errNotSynchronized = errors.New("not synchronized with the container runtime")

// liveSetter is a Readiness that can ask for proof of a live connection at
// each answer (*ready.Server).
type liveSetter interface{ SetLive(func() error) }

// dial connects to the runtime's NRI socket and records the connection for
// Live; wrap (tests) wraps what the stub gets.
func (p *Plugin) dial(path string, wrap func(net.Conn) net.Conn) (net.Conn, error) {
	c, err := net.Dial("unix", path)
	if err != nil {
		return nil, err
	}
	if uc, ok := c.(*net.UnixConn); ok {
		p.nriConn.Store(uc)
	}
	if wrap != nil {
		return wrap(c), nil
	}
	return c, nil
}

// Live proves, now, that the plugin is synchronized on a connection the
// runtime has not closed: the recorded state alone can be stale, as in a
// lpu-nri frozen past the runtime's plugin timeout, which thaws still
// recording "connected" until its reader sees the close. The connection's
// socket is polled without waiting: a peer that closed or shut down its
// side (POLLHUP, POLLRDHUP) or an error means not live, whatever requests
// are still buffered ahead of the close.
func (p *Plugin) Live() error {
	if !p.synced.Load() {
		return errNotSynchronized
	}
	c := p.nriConn.Load()
	if c == nil {
		return nil // synchronized without a dialed connection (tests drive Synchronize)
	}
	return peerOpen(c)
}

// peerOpen returns nil while the other end of c has not closed it.
func peerOpen(c *net.UnixConn) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return fmt.Errorf("nri connection: %w", err)
	}
	var revents int16
	var perr error
	if err := raw.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLRDHUP}}
		_, perr = unix.Poll(fds, 0)
		revents = fds[0].Revents
	}); err != nil {
		return fmt.Errorf("nri connection: %w", err) // closed on our side
	}
	if perr != nil && !errors.Is(perr, unix.EINTR) {
		return fmt.Errorf("nri connection: poll: %w", perr)
	}
	if revents&(unix.POLLHUP|unix.POLLRDHUP|unix.POLLERR|unix.POLLNVAL) != 0 {
		return errors.New("the container runtime closed the NRI connection")
	}
	return nil
}

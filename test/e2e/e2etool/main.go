// Command e2etool holds the small network helpers the end-to-end scripts
// need and bash cannot do by itself. Only the e2e uses it.
//
//	e2etool relay tcp:10.244.77.1:6443 tcp:127.0.0.1:6443   # a byte relay
//	e2etool relay unix:/run/x/api.sock tcp:127.0.0.1:6443   # unix socket to TCP
//	e2etool ready /tmp/lpu-e2e.x/state/nri-ready.sock      # exit 0 on "connected"
//	e2etool stall SOCK PIDFILE FLAG                        # accept, never answer
//
// relay copies bytes both ways between every accepted connection and a new
// connection to the target. ready asks lpu-nri's readiness socket through
// pkg/ready and prints its answer. stall accepts connections on a unix
// socket and never answers; when FLAG exists at an accept it removes FLAG
// and freezes the process whose PID is in PIDFILE (SIGSTOP) for --freeze
// (4 s), printing "accepted", "froze PID" and "thawed PID".
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hyperaccel/lpu-node/pkg/ready"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "e2etool:", err)
		os.Exit(1)
	}
}

func run(args []string, out io.Writer) error {
	if len(args) == 0 {
		return errors.New("usage: e2etool relay|ready|stall ARGS")
	}
	switch args[0] {
	case "relay":
		return runRelay(args[1:])
	case "ready":
		return runReady(args[1:], out)
	case "stall":
		return runStall(args[1:], out)
	default:
		return fmt.Errorf("unknown command %q: want relay, ready or stall", args[0])
	}
}

// splitAddr parses "unix:PATH" or "tcp:HOST:PORT" into a network and address.
func splitAddr(s string) (network, addr string, err error) {
	network, addr, ok := strings.Cut(s, ":")
	if !ok || (network != "unix" && network != "tcp") || addr == "" {
		return "", "", fmt.Errorf("address %q: want unix:PATH or tcp:HOST:PORT", s)
	}
	return network, addr, nil
}

func runRelay(args []string) error {
	if len(args) != 2 {
		return errors.New("usage: e2etool relay LISTEN TARGET (unix:PATH or tcp:HOST:PORT)")
	}
	ln, err := listen(args[0])
	if err != nil {
		return err
	}
	defer ln.Close()
	tnet, taddr, err := splitAddr(args[1])
	if err != nil {
		return err
	}
	return relay(ln, tnet, taddr)
}

func listen(s string) (net.Listener, error) {
	network, addr, err := splitAddr(s)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen(network, addr)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", s, err)
	}
	return ln, nil
}

// acceptEach calls fn for every connection ln accepts, in turn, until ln is
// closed (nil) or fn fails.
func acceptEach(ln net.Listener, fn func(net.Conn) error) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("accept: %w", err)
		}
		if err := fn(c); err != nil {
			return err
		}
	}
}

// relay serves ln until it is closed: every connection is piped to a new
// connection to the target, both ways, until either side closes.
func relay(ln net.Listener, network, addr string) error {
	return acceptEach(ln, func(c net.Conn) error {
		go func() {
			defer c.Close()
			t, err := net.Dial(network, addr)
			if err != nil {
				fmt.Fprintf(os.Stderr, "e2etool relay: dial %s:%s: %v\n", network, addr, err)
				return
			}
			defer t.Close()
			pipe(c, t)
		}()
		return nil
	})
}

// pipe copies a to b and b to a; when one direction ends it half-closes
// the other side's write end (or closes it), as the Python relays did.
func pipe(a, b net.Conn) {
	var wg sync.WaitGroup
	cp := func(dst, src net.Conn) {
		defer wg.Done()
		_, _ = io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		} else {
			_ = dst.Close()
		}
	}
	wg.Add(2)
	go cp(a, b)
	go cp(b, a)
	wg.Wait()
}

func runReady(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("ready", flag.ContinueOnError)
	timeout := fs.Duration("timeout", time.Second, "how long to wait for the answer")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("usage: e2etool ready [--timeout D] SOCKET")
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := ready.Check(ctx, fs.Arg(0)); err != nil {
		fmt.Fprintln(out, "disconnected")
		return err
	}
	fmt.Fprintln(out, "connected")
	return nil
}

func runStall(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("stall", flag.ContinueOnError)
	freeze := fs.Duration("freeze", 4*time.Second, "how long the process stays stopped")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 3 {
		return errors.New("usage: e2etool stall [--freeze D] SOCK PIDFILE FLAG")
	}
	ln, err := net.Listen("unix", fs.Arg(0))
	if err != nil {
		return fmt.Errorf("listen %s: %w", fs.Arg(0), err)
	}
	defer ln.Close()
	return stall(ln, fs.Arg(1), fs.Arg(2), *freeze, out)
}

// stall accepts on ln and holds every connection without a word. The
// freeze runs in the accept loop, as a stalled peer would: connections
// that arrive meanwhile wait in the backlog.
func stall(ln net.Listener, pidfile, flagFile string, freeze time.Duration, out io.Writer) error {
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	return acceptEach(ln, func(c net.Conn) error {
		held = append(held, c)
		fmt.Fprintln(out, "accepted")
		if err := os.Remove(flagFile); err != nil {
			return nil // no flag: only hold the connection
		}
		return freezeFor(pidfile, freeze, out)
	})
}

// freezeFor stops the process named in pidfile for d, then continues it.
func freezeFor(pidfile string, d time.Duration, out io.Writer) error {
	b, err := os.ReadFile(pidfile)
	if err != nil {
		return fmt.Errorf("read %s: %w", pidfile, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return fmt.Errorf("parse %s: %w", pidfile, err)
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return fmt.Errorf("stop %d: %w", pid, err)
	}
	fmt.Fprintln(out, "froze", pid)
	time.Sleep(d)
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		return fmt.Errorf("continue %d: %w", pid, err)
	}
	fmt.Fprintln(out, "thawed", pid)
	return nil
}

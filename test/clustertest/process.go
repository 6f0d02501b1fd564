package clustertest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// stopGrace is how long a component gets to exit after SIGTERM before it
// is killed: the v1.37 binaries sometimes hang on SIGTERM.
const stopGrace = 5 * time.Second

// proc is one running component.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{} // closed when the process has been reaped
	err  error         // its exit status, once done is closed
}

// startProc runs bin with args, output to logDir/name.log. The child is
// killed if this process dies first, so a crashed test leaves nothing.
func startProc(name, bin, logDir string, args ...string) (*proc, error) {
	logPath := filepath.Join(logDir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		_ = f.Close()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the process has ended, with its status.
func (p *proc) exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// stop ends the process by its PID: SIGTERM, then SIGKILL after stopGrace.
func (p *proc) stop() {
	if done, _ := p.exited(); done {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(stopGrace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// tail returns the last n lines of the process's log.
func (p *proc) tail(n int) string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return ""
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// waitFor polls ready every 200 ms until it returns nil, p exits, or ctx
// ends; the error then names what was awaited, the last failure and the
// end of p's log.
func waitFor(ctx context.Context, p *proc, what string, ready func(context.Context) error) error {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		attempt, cancel := context.WithTimeout(ctx, 5*time.Second)
		last = ready(attempt)
		cancel()
		if last == nil {
			return nil
		}
		if done, err := p.exited(); done {
			return fmt.Errorf("%s: %s exited (%v) before it was ready; log %s:\n%s", what, p.name, err, p.log, p.tail(20))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: not ready: %w (last: %v); log %s:\n%s", what, ctx.Err(), last, p.log, p.tail(20))
		case <-tick.C:
		}
	}
}

// freePorts returns n distinct free TCP ports on 127.0.0.1. They are free
// when returned; a port taken in between makes a component fail to start,
// which its wait reports.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func hostPort(port int) string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

package prom

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// proc is a process the test started; it is stopped by its PID.
type proc struct {
	name, log string
	cmd       *exec.Cmd
	done      chan struct{}
	err       error
}

// start runs bin with args and env (added to this process'), logging to
// dir/<name>.log; the test's cleanup stops it by PID.
func start(t *testing.T, dir, name, bin string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, log: filepath.Join(dir, name+".log"), done: make(chan struct{})}
	f, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = f, f
	if err := p.cmd.Start(); err != nil {
		f.Close()
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { p.err = p.cmd.Wait(); f.Close(); close(p.done) }()
	t.Logf("started %s, pid %d", name, p.cmd.Process.Pid)
	t.Cleanup(func() { p.stop(t) })
	return p
}

// stop sends SIGTERM to the process' PID, SIGKILL after 5 s.
func (p *proc) stop(t *testing.T) {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		t.Logf("%s (pid %d) ignored SIGTERM for 5s; killing it", p.name, p.cmd.Process.Pid)
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// tail is the last lines of the process' log.
func (p *proc) tail() string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return fmt.Sprintf("(read %s: %v)", p.log, err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-20):], "\n")
}

// waitFor polls ok every 100 ms until it holds or timeout passes; it fails
// the test with what, and the tail of each process' log, when it does not,
// or at once when one of procs exits.
func waitFor(t *testing.T, timeout time.Duration, what string, ok func() bool, procs ...*proc) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !ok() {
		for _, p := range procs {
			if p.exited() {
				t.Fatalf("%s exited (%v) while waiting for %s; log tail:\n%s", p.name, p.err, what, p.tail())
			}
		}
		if time.Now().After(deadline) {
			var b strings.Builder
			for _, p := range procs {
				fmt.Fprintf(&b, "--- %s log tail:\n%s\n", p.name, p.tail())
			}
			t.Fatalf("%s: not within %v\n%s", what, timeout, b.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// freeAddr returns a free 127.0.0.1 port.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// shortDir is a fresh directory with a short path (unix socket paths are
// limited to 107 bytes), removed when the test ends.
func shortDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("/tmp", "lpuprom")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

// daemons builds lpu-device-plugin, lpu-dra and lpu-nri from this checkout
// once per test binary and returns their directory.
func daemons(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "lpuprom-bin")
		if buildErr != nil {
			return
		}
		cmd := exec.Command("go", "build", "-o", buildDir+"/", "./cmd/lpu-device-plugin", "./cmd/lpu-dra", "./cmd/lpu-nri")
		cmd.Dir = repoRoot(t)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			buildErr = errors.Join(fmt.Errorf("go build the daemons: %w", err), errors.New(out.String()))
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildDir
}

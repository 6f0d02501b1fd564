package daemontest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// StopGrace is how long a child gets to exit after SIGTERM before Stop
// kills it: some programs (the v1.37 control-plane binaries) sometimes
// hang on SIGTERM.
const StopGrace = 5 * time.Second

// Proc is a child process a test (or a harness outside `go test`)
// started. It is only ever signalled by its own PID.
type Proc struct {
	// Name names the process in logs and errors.
	Name string
	// Log is the file holding its standard output and error.
	Log string

	cmd  *exec.Cmd
	done chan struct{} // closed once the process has been reaped
	err  error         // its exit status, once done is closed
}

// StartProc runs bin with args, its output to logDir/name.log and env
// added to this process' environment. The child is killed if this process
// dies first, so a crashed test leaves nothing running; otherwise Stop
// ends it.
func StartProc(name, bin, logDir string, env []string, args ...string) (*Proc, error) {
	logPath := filepath.Join(logDir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Proc{Name: name, Log: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		_ = f.Close()
		close(p.done)
	}()
	return p, nil
}

// Start is StartProc for one test, with the log in dir: it fails the test
// when bin does not start and stops the process when the test ends.
func Start(t testing.TB, dir, name, bin string, env []string, args ...string) *Proc {
	t.Helper()
	p, err := StartProc(name, bin, dir, env, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("started %s, pid %d", name, p.PID())
	t.Cleanup(func() {
		if p.Stop() {
			t.Logf("%s (pid %d) ignored SIGTERM for %v; killed it", p.Name, p.PID(), StopGrace)
		}
	})
	return p
}

// PID is the process' ID.
func (p *Proc) PID() int { return p.cmd.Process.Pid }

// Exited reports whether the process has ended, with its exit status.
func (p *Proc) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Stop ends the process by its PID: SIGTERM, then SIGKILL after
// StopGrace. It reports whether it had to kill; it is safe to call twice.
func (p *Proc) Stop() (killed bool) {
	if done, _ := p.Exited(); done {
		return false
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return false
	case <-time.After(StopGrace):
		_ = p.cmd.Process.Kill()
		<-p.done
		return true
	}
}

// Tail returns the last n lines of the process' log.
func (p *Proc) Tail(n int) string {
	b, err := os.ReadFile(p.Log)
	if err != nil {
		return fmt.Sprintf("(read %s: %v)", p.Log, err)
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	return string(bytes.Join(lines[max(0, len(lines)-n):], []byte("\n")))
}

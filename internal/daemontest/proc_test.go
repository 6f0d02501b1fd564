package daemontest

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// sh is the shell the child processes of these tests run.
func sh(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh on PATH")
	}
	return p
}

func TestProcStopsByPIDAndKeepsItsLog(t *testing.T) {
	dir := t.TempDir()
	p := Start(t, dir, "child", sh(t), []string{"DAEMONTEST_WORD=hello"},
		"-c", `echo one; echo two; echo "$DAEMONTEST_WORD"; exec sleep 60`)
	WaitFor(t, 5*time.Second, "three lines logged", func() bool {
		return strings.Count(p.Tail(10), "\n") == 2
	}, p)
	if got := p.Tail(2); got != "two\nhello" {
		t.Fatalf("Tail(2) = %q, want the last two lines", got)
	}
	if done, _ := p.Exited(); done {
		t.Fatal("child exited on its own")
	}
	if p.Stop() {
		t.Fatal("Stop killed a child that exits on SIGTERM")
	}
	done, err := p.Exited()
	var exit *exec.ExitError
	if !done || !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGTERM {
		t.Fatalf("after Stop: exited %v, %v; want ended by SIGTERM", done, err)
	}
	if p.Stop() {
		t.Fatal("a second Stop killed")
	}
}

func TestAwaitFailsAtOnceWhenAProcessExits(t *testing.T) {
	p, err := StartProc("quitter", sh(t), t.TempDir(), nil, "-c", "echo giving up; exit 3")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop() })
	begin := time.Now()
	err = Await(context.Background(), 10*time.Millisecond, "start quitter",
		func(context.Context) error { return errors.New("not listening") }, p)
	if err == nil || !strings.Contains(err.Error(), "quitter exited (exit status 3)") || !strings.Contains(err.Error(), "giving up") {
		t.Fatalf("Await = %v, want the exit and the log's tail", err)
	}
	if d := time.Since(begin); d > 5*time.Second {
		t.Fatalf("Await took %v after the exit", d)
	}
}

func TestAwaitEndsWithItsContext(t *testing.T) {
	p := Start(t, t.TempDir(), "sleeper", sh(t), nil, "-c", "echo waiting; exec sleep 60")
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	calls := 0
	err := Await(ctx, 20*time.Millisecond, "never", func(context.Context) error { calls++; return errors.New("refused") }, p)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "last: refused") || !strings.Contains(err.Error(), "--- sleeper log") {
		t.Fatalf("Await = %v, want the deadline, the last failure and sleeper's log", err)
	}
	if calls < 2 {
		t.Fatalf("ready called %d times, want it polled", calls)
	}
	if err := Await(context.Background(), time.Second, "at once", func(context.Context) error { return nil }, p); err != nil {
		t.Fatalf("Await of a ready condition = %v", err)
	}
}

func TestStartProcOfAMissingProgram(t *testing.T) {
	if _, err := StartProc("ghost", "/nonexistent/ghost", t.TempDir(), nil); err == nil || !strings.Contains(err.Error(), "start ghost") {
		t.Fatalf("StartProc = %v, want a start error naming ghost", err)
	}
}

func TestFreePortsAreDistinct(t *testing.T) {
	ports, err := FreePorts(5)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if p <= 0 || seen[p] {
			t.Fatalf("FreePorts(5) = %v, want 5 distinct ports", ports)
		}
		seen[p] = true
	}
	if got := Loopback(8080); got != "127.0.0.1:8080" {
		t.Fatalf("Loopback(8080) = %q", got)
	}
}

// Package daemontest holds the helpers the daemons' tests share: a free
// loopback address for a metrics endpoint, a directory short enough for
// unix sockets, polling until a condition holds, reading samples from a
// /metrics page, running a part in the background for one test, and
// running a program as a child process (Start, StartProc, WaitFor, Await).
//
//	sock := filepath.Join(daemontest.ShortDir(t), "kubelet.sock")
//	addr := daemontest.FreeAddr(t)
//	// start the daemon with --metrics-addr addr
//	daemontest.Eventually(t, 5*time.Second, "ready", func() bool {
//		code, _ := daemontest.Get("http://" + addr + "/readyz")
//		return code == http.StatusOK
//	})
//	n := daemontest.Scrape(t, addr, `lpu_nri_refusals_total{reason="bad-seal"}`)
//
// A daemon (or any program) as a child process, stopped by its PID when
// the test ends; a wait fails at once, with the end of its log, if it
// exits:
//
//	p := daemontest.Start(t, dir, "lpu-nri", bin, env, "--metrics-addr", addr)
//	daemontest.WaitFor(t, 30*time.Second, "lpu-nri ready", func() bool {
//		code, _ := daemontest.Get("http://" + addr + "/readyz")
//		return code == http.StatusOK
//	}, p)
//
// StartProc and Await are the same without a test, for harnesses such as
// internal/clustertest that also run outside `go test`.
package daemontest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Run runs run (a health monitor's Run, a plugin's) in the background
// until the test ends; then it cancels run's context and fails the test
// when run returned an error.
func Run(t testing.TB, run func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
}

// Eventually polls cond every 10 ms until it holds, failing the test with
// what when it does not within the given time.
func Eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// attemptTimeout bounds one readiness check of Await, so that one hung
// request does not use up the whole wait.
const attemptTimeout = 5 * time.Second

// tailLines is how much of each log a failed wait shows.
const tailLines = 20

// Await calls ready every interval until it returns nil, one of procs
// exits, or ctx ends; each call gets a context of at most 5 s. Its error
// names what was awaited, ready's last failure and the end of each
// process' log.
func Await(ctx context.Context, every time.Duration, what string, ready func(context.Context) error, procs ...*Proc) error {
	begin := time.Now()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		attempt, cancel := context.WithTimeout(ctx, attemptTimeout)
		last := ready(attempt)
		cancel()
		if last == nil {
			return nil
		}
		for _, p := range procs {
			if done, err := p.Exited(); done {
				return fmt.Errorf("%s: %s exited (%v) before it was ready; log %s:\n%s", what, p.Name, err, p.Log, p.Tail(tailLines))
			}
		}
		select {
		case <-ctx.Done():
			var b strings.Builder
			for _, p := range procs {
				fmt.Fprintf(&b, "\n--- %s log %s:\n%s", p.Name, p.Log, p.Tail(tailLines))
			}
			return fmt.Errorf("%s: not ready after %v: %w (last: %v)%s", what, time.Since(begin).Round(time.Millisecond), ctx.Err(), last, b.String())
		case <-tick.C:
		}
	}
}

// errNotYet is what WaitFor's condition answers until it holds.
var errNotYet = errors.New("condition not met")

// WaitFor polls ok every 100 ms until it holds, failing the test when it
// does not within timeout, or at once when one of procs exits, with the
// end of each process' log. ok runs on the test's goroutine, so it may
// fail the test itself.
func WaitFor(t testing.TB, timeout time.Duration, what string, ok func() bool, procs ...*Proc) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := Await(ctx, 100*time.Millisecond, what, func(context.Context) error {
		if ok() {
			return nil
		}
		return errNotYet
	}, procs...)
	if err != nil {
		t.Fatal(err)
	}
}

// FreeAddr returns a loopback HOST:PORT that nothing listened on a moment
// ago.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ports, err := FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	return Loopback(ports[0])
}

// FreePorts returns n distinct TCP ports on 127.0.0.1 that are free when
// returned (each is held until all are found). A port taken in between
// makes the program given it fail to start, which its wait reports.
func FreePorts(n int) ([]int, error) {
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

// Loopback is 127.0.0.1:port.
func Loopback(port int) string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

// Get fetches url and returns the status code and body; a request that
// fails returns 0 and the error's text (endpoints come and go in these
// tests).
func Get(url string) (int, string) {
	rsp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer rsp.Body.Close()
	b, err := io.ReadAll(rsp.Body)
	if err != nil {
		return 0, err.Error()
	}
	return rsp.StatusCode, string(b)
}

// Value finds the sample of name whose labels include every label given
// as `key="value"`, in Prometheus text format; ok is false when absent.
func Value(body, name string, labels ...string) (v float64, ok bool) {
	for line := range strings.SplitSeq(body, "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		head := line[:i]
		match := true
		for _, l := range labels {
			if !strings.Contains(head, l) {
				match = false
				break
			}
		}
		if !match {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return 0, false
		}
		return v, true
	}
	return 0, false
}

// Sample is Value, with -1 for a sample that is absent.
func Sample(body, name string, labels ...string) float64 {
	if v, ok := Value(body, name, labels...); ok {
		return v
	}
	return -1
}

// Scrape reads addr's /metrics and returns the value of sample, written as
// name or name{label="value",...}; -1 when the endpoint does not answer.
// A sample missing from an answered page fails the test.
func Scrape(t testing.TB, addr, sample string) float64 {
	t.Helper()
	code, body := Get("http://" + addr + "/metrics")
	if code == 0 {
		return -1
	}
	name, labels := sample, []string(nil)
	if i := strings.IndexByte(sample, '{'); i >= 0 {
		name = sample[:i]
		labels = strings.Split(strings.TrimSuffix(sample[i+1:], "}"), ",")
	}
	v, ok := Value(body, name, labels...)
	if !ok {
		t.Fatalf("no sample %s in /metrics:\n%s", sample, body)
	}
	return v
}

// ShortDir returns a new directory under /tmp, removed when the test ends.
// Unix socket paths must stay under 108 bytes, which a t.TempDir() path
// named after a long test does not promise.
func ShortDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "lpu")
	if err != nil {
		t.Fatalf("short dir: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

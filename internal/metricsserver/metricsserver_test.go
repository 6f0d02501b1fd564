package metricsserver

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestHandlerProbes(t *testing.T) {
	var healthy, ready atomic.Bool
	check := func(b *atomic.Bool, why string) Check {
		return func() error {
			if !b.Load() {
				return errors.New(why)
			}
			return nil
		}
	}
	tests := map[string]struct {
		healthz, readyz Check
		healthy, ready  bool
		path            string
		wantCode        int
		wantBody        string
	}{
		"healthz passes":      {healthz: check(&healthy, "down"), healthy: true, path: "/healthz", wantCode: 200, wantBody: "ok\n"},
		"healthz fails":       {healthz: check(&healthy, "not registered"), path: "/healthz", wantCode: 503, wantBody: "not registered\n"},
		"readyz fails":        {readyz: check(&ready, "not ready"), path: "/readyz", wantCode: 503, wantBody: "not ready\n"},
		"readyz passes":       {readyz: check(&ready, "not ready"), ready: true, path: "/readyz", wantCode: 200, wantBody: "ok\n"},
		"nil check passes":    {path: "/healthz", wantCode: 200, wantBody: "ok\n"},
		"nil readyz passes":   {healthz: check(&healthy, "down"), path: "/readyz", wantCode: 200, wantBody: "ok\n"},
		"unknown path is 404": {path: "/debug", wantCode: 404},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			healthy.Store(tc.healthy)
			ready.Store(tc.ready)
			srv := newServer(t, Handler(prometheus.NewRegistry(), tc.healthz, tc.readyz))
			code, body := get(t, srv+tc.path)
			if code != tc.wantCode || (tc.wantBody != "" && body != tc.wantBody) {
				t.Fatalf("%s = %d %q, want %d %q", tc.path, code, body, tc.wantCode, tc.wantBody)
			}
		})
	}
}

func TestHandlerMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "test_things_total", Help: "Things."})
	reg.MustRegister(c)
	c.Add(7)
	srv := newServer(t, Handler(reg, nil, nil))
	code, body := get(t, srv+"/metrics")
	if code != 200 || !strings.Contains(body, "test_things_total 7\n") {
		t.Fatalf("/metrics = %d:\n%s", code, body)
	}
}

func TestServeLifecycle(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ServeLimited(ctx, ln, Handler(prometheus.NewRegistry(), nil, nil), nil, Limits{}) }()
	if code, _ := get(t, "http://"+addr+"/healthz"); code != 200 {
		t.Fatalf("/healthz = %d", code)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("after cancel: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ServeLimited did not return after cancel")
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Fatalf("%s still accepts connections after shutdown", addr)
	}
}

func TestServeAddr(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Serve(ctx, "", nil, nil); err != nil {
		t.Fatalf("disabled endpoint: %v", err)
	}
	err := Serve(context.Background(), "256.0.0.1:x", nil, nil)
	if err == nil || !strings.Contains(err.Error(), "256.0.0.1:x") {
		t.Fatalf("bad address: err = %v, want one naming it", err)
	}
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	if err := Serve(context.Background(), taken.Addr().String(), nil, nil); err == nil {
		t.Fatal("taken address accepted")
	}
}

// newServer serves h on a test server; the lifecycle has its own test.
func newServer(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	rsp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(rsp.Body)
	rsp.Body.Close()
	if err != nil {
		t.Fatalf("read %s: %v", url, err)
	}
	return rsp.StatusCode, string(b)
}

// startLimited serves a probe handler with lim on a loopback port until the
// test ends and returns the address.
func startLimited(t *testing.T, lim Limits) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ServeLimited(ctx, ln, Handler(prometheus.NewRegistry(), nil, nil), nil, lim) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return ln.Addr().String()
}

// getOn sends one keep-alive request on c and reads the status line.
func getOn(t *testing.T, c net.Conn, path string) string {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	rsp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	_, _ = io.Copy(io.Discard, rsp.Body)
	rsp.Body.Close()
	return rsp.Status
}

// closedWithin reports whether the server closes c within d.
func closedWithin(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

func TestIdleConnectionsClosed(t *testing.T) {
	addr := startLimited(t, Limits{IdleTimeout: 200 * time.Millisecond})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := getOn(t, c, "/healthz"); got != "200 OK" {
		t.Fatalf("status %q", got)
	}
	start := time.Now()
	if !closedWithin(c, 3*time.Second) {
		t.Fatal("idle keep-alive connection still open after 3s (idle timeout 200ms)")
	}
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Errorf("closed after %v, before the idle timeout", d)
	}
	// A connection that never sends a request is closed too.
	silent, err := net.Dial("tcp", startLimited(t, Limits{ReadHeaderTimeout: 200 * time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	if !closedWithin(silent, 3*time.Second) {
		t.Fatal("silent connection still open after 3s (header timeout 200ms)")
	}
}

func TestConnectionCap(t *testing.T) {
	const limit = 4
	addr := startLimited(t, Limits{MaxConns: limit, ReadHeaderTimeout: time.Minute, IdleTimeout: time.Minute})
	held := make([]net.Conn, limit)
	for i := range held {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if got := getOn(t, c, "/healthz"); got != "200 OK" { // proves it was accepted
			t.Fatalf("connection %d: %q", i, got)
		}
		held[i] = c
	}
	// The kernel completes the handshake; on a loaded machine the server's
	// reset can arrive before Dial returns, and fails it: refused too.
	if extra, err := net.Dial("tcp", addr); err == nil {
		defer extra.Close()
		_, _ = io.WriteString(extra, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		if !closedWithin(extra, 3*time.Second) {
			t.Fatal("connection beyond the cap was served or left open")
		}
	} else if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("dial beyond the cap: %v, want accepted and reset, or reset", err)
	}
	// The held connections were not given up for it.
	for i, c := range held {
		if got := getOn(t, c, "/healthz"); got != "200 OK" {
			t.Fatalf("held connection %d after the refusal: %q", i, got)
		}
	}
	// A slot freed is usable again (the server frees it once it has seen
	// the close; until then a newcomer is refused, and retried).
	held[0].Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			if time.Now().After(deadline) {
				t.Fatalf("no connection accepted after a slot was freed: %v", err)
			}
			time.Sleep(20 * time.Millisecond)
			continue
		}
		_ = c.SetDeadline(time.Now().Add(time.Second))
		_, _ = io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		rsp, err := http.ReadResponse(bufio.NewReader(c), nil)
		c.Close()
		if err == nil && rsp.StatusCode == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no connection accepted after a slot was freed: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestHeaderLimit(t *testing.T) {
	addr := startLimited(t, Limits{MaxHeaderBytes: 1 << 10})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	_, _ = io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: "+strings.Repeat("a", 64<<10)+"\r\n\r\n")
	rsp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	if rsp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("status %d, want 431", rsp.StatusCode)
	}
}

// TestGoroutinesBounded: a flood of idle connections holds at most the cap
// of server goroutines, and they go once the clients leave.
func TestGoroutinesBounded(t *testing.T) {
	const limit, flood = 8, 300
	before := runtime.NumGoroutine()
	addr := startLimited(t, Limits{MaxConns: limit, ReadHeaderTimeout: time.Minute, IdleTimeout: time.Minute})
	conns := make([]net.Conn, 0, flood)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range flood {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			continue // the backlog may overflow; that is a refusal too
		}
		conns = append(conns, c)
	}
	time.Sleep(200 * time.Millisecond) // let the server accept what it will
	// Per served connection: its serve goroutine and, at most, a
	// background reader. Plus the Serve goroutines of the test server.
	if got, max := runtime.NumGoroutine()-before, 2*limit+4; got > max {
		t.Fatalf("%d goroutines for %d idle connections (cap %d), want at most %d", got, len(conns), limit, max)
	}
	for _, c := range conns {
		c.Close()
	}
	conns = conns[:0]
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine()-before > 4 {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines left after the clients closed", runtime.NumGoroutine()-before)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSilentConnectionsGiveWay: at the cap, a newcomer takes the slot of
// the oldest connection that has sent nothing (reset), or of a keep-alive
// connection idle longer than the header timeout; never of one that is
// newer or busy.
func TestSilentConnectionsGiveWay(t *testing.T) {
	const limit = 4
	addr := startLimited(t, Limits{MaxConns: limit, ReadHeaderTimeout: time.Minute, IdleTimeout: time.Minute})
	silent := make([]net.Conn, limit)
	for i := range silent {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		silent[i] = c
		time.Sleep(20 * time.Millisecond) // accept order = dial order
	}
	for i := range limit {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if got := getOn(t, c, "/healthz"); got != "200 OK" {
			t.Fatalf("newcomer %d at the cap: %q", i, got)
		}
		if !closedWithin(silent[i], 3*time.Second) {
			t.Fatalf("silent connection %d (the oldest) kept its slot", i)
		}
		for _, s := range silent[i+1:] {
			if closedWithin(s, 10*time.Millisecond) {
				t.Fatalf("a newer silent connection was closed before silent %d", i)
			}
		}
	}

	// Idle keep-alive connections give way once idle past the grace (the
	// header timeout, 200 ms here).
	addr = startLimited(t, Limits{MaxConns: 2, ReadHeaderTimeout: 200 * time.Millisecond, IdleTimeout: time.Minute})
	idle := make([]net.Conn, 2)
	for i := range idle {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if got := getOn(t, c, "/healthz"); got != "200 OK" {
			t.Fatalf("keep-alive %d: %q", i, got)
		}
		idle[i] = c
		time.Sleep(20 * time.Millisecond) // idle order = request order: the one quiet longest goes
	}
	time.Sleep(400 * time.Millisecond)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := getOn(t, c, "/healthz"); got != "200 OK" {
		t.Fatalf("newcomer past idle keep-alive connections: %q", got)
	}
	if !closedWithin(idle[0], 3*time.Second) {
		t.Fatal("the oldest idle keep-alive connection kept its slot")
	}
}

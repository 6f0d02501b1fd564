package metricsserver

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
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
	go func() { done <- ServeListener(ctx, ln, Handler(prometheus.NewRegistry(), nil, nil), nil) }()
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
		t.Fatal("ServeListener did not return after cancel")
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

package metrics

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/verify"
	"github.com/hyperaccel/lpu-node/internal/devicemetrics/devicemetricstest"
)

func TestServe(t *testing.T) {
	m := New()
	var ready atomic.Bool
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.ServeListener(ctx, ln, ready.Load, slog.New(slog.NewTextHandler(io.Discard, nil))) }()
	base := "http://" + ln.Addr().String()
	get := func(path string) (int, string) {
		t.Helper()
		rsp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer rsp.Body.Close()
		b, _ := io.ReadAll(rsp.Body)
		return rsp.StatusCode, string(b)
	}
	if code, _ := get("/readyz"); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz = %d before ready", code)
	}
	ready.Store(true)
	if code, _ := get("/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz = %d when ready", code)
	}
	if code, _ := get("/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz = %d", code)
	}
	m.Injections.Add(3)
	m.Refusals.WithLabelValues(verify.ReasonBadSeal).Inc()
	m.Connected.Set(1)
	m.Build.WithLabelValues("lpu-nri", "1.2.3", "go1.26").Set(1)
	m.WatchLedger(func() map[string]int { return map[string]int{"team-a": 7} })
	_, body := get("/metrics")
	// The chart's tests check alerts and panels against this list.
	devicemetricstest.Check(t, "lpu-nri", body)
	for _, want := range []string{
		"lpu_nri_injections_total 3",
		`lpu_nri_refusals_total{reason="bad-seal"} 1`,
		`lpu_nri_refusals_total{reason="pod-annotation"} 0`,
		"lpu_nri_connected 1",
		`lpu_nri_ledger_ids{namespace="team-a"} 7`,
		"lpu_nri_ledger_share_refused_total 0",
		`lpu_build_info{daemon="lpu-nri",goversion="go1.26",version="1.2.3"} 1`,
		"lpu_nri_unallocated_holders 0",
		"lpu_nri_create_container_duration_seconds_count 0",
		"go_goroutines",
	} {
		if !strings.Contains(body, want+"\n") && !strings.Contains(body, want+" ") {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not stop")
	}
}

func TestServeDisabled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := New().Serve(ctx, "", nil, slog.Default()); err != nil {
		t.Fatal(err)
	}
	if err := New().Serve(context.Background(), "256.0.0.1:x", nil, slog.Default()); err == nil {
		t.Fatal("bad address accepted")
	}
}

package metricsserver

import (
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// flood runs n clients against addr until ctx ends: each opens a
// connection, sends nothing, waits until the server ends it (or hold
// passes) and reconnects at once. It returns how many connections they
// opened.
func flood(ctx context.Context, addr string, n int, hold time.Duration) func() int64 {
	var opened atomic.Int64
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 1)
			for ctx.Err() == nil {
				c, err := net.DialTimeout("tcp", addr, time.Second)
				if err != nil {
					continue
				}
				opened.Add(1)
				_ = c.SetReadDeadline(time.Now().Add(hold))
				stop := context.AfterFunc(ctx, func() { c.Close() })
				_, _ = c.Read(buf)
				stop()
				c.Close()
			}
		}()
	}
	return func() int64 { wg.Wait(); return opened.Load() }
}

// probeClient behaves like the kubelet's HTTP prober: a new connection per
// probe, a 1 s timeout.
func probeClient() *http.Client {
	return &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
}

// TestProbesUnderFlood: 72 silent clients that reconnect as soon as they
// are let go (more than the 64-connection cap) must not starve the
// kubelet's probes: a silent connection gives its slot to a newcomer.
func TestProbesUnderFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("floods loopback for 3 s")
	}
	addr := startLimited(t, Limits{}) // the production limits
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	wait := flood(ctx, addr, MaxConns+8, 10*time.Second)
	time.Sleep(300 * time.Millisecond) // let the flood fill every slot
	client := probeClient()
	var ok, failed int
	var lastErr error
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for ctx.Err() == nil {
		for _, path := range []string{"/healthz", "/readyz"} {
			rsp, err := client.Get("http://" + addr + path)
			if err == nil {
				_, _ = io.Copy(io.Discard, rsp.Body)
				rsp.Body.Close()
				if rsp.StatusCode != http.StatusOK {
					err = &statusError{rsp.StatusCode}
				}
			}
			if err != nil {
				failed++
				lastErr = err
				continue
			}
			ok++
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
		}
	}
	opened := wait()
	t.Logf("probes ok=%d failed=%d (last error %v); flood opened %d connections", ok, failed, lastErr, opened)
	if opened < MaxConns+8 {
		t.Fatalf("the flood opened only %d connections", opened)
	}
	if total := ok + failed; total < 20 || float64(ok) < 0.95*float64(total) {
		t.Fatalf("probes ok=%d of %d under the flood, want >= 95%% (last error %v)", ok, total, lastErr)
	}
}

type statusError struct{ code int }

func (e *statusError) Error() string { return http.StatusText(e.code) }

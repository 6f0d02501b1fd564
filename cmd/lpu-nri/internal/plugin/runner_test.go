package plugin

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hyperaccel/lpu-node/internal/backoff"
	"github.com/hyperaccel/lpu-node/internal/nritest"
)

func TestRunnerValidate(t *testing.T) {
	f := newFixture(t, 1, false)
	tests := map[string]struct {
		r    Runner
		says string
	}{
		"one-digit index": {Runner{Plugin: f.p, Name: "lpu", Index: "1", Socket: "/x"}, "index"},
		"letters index":   {Runner{Plugin: f.p, Name: "lpu", Index: "ab", Socket: "/x"}, "index"},
		"empty name":      {Runner{Plugin: f.p, Name: "", Index: "10", Socket: "/x"}, "name"},
		"slash in name":   {Runner{Plugin: f.p, Name: "lpu/x", Index: "10", Socket: "/x"}, "name"},
		"no socket":       {Runner{Plugin: f.p, Name: "lpu", Index: "10"}, "socket"},
		"no plugin":       {Runner{Name: "lpu", Index: "10", Socket: "/x"}, "plugin"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := tc.r.Run(context.Background()) // returns at once on invalid input
			if err == nil || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("Run = %v, want an error about %s", err, tc.says)
			}
		})
	}
}

// TestRunnerWaitsForRuntime: the socket appears late; the runner keeps
// retrying with bounded backoff and connects soon after.
func TestRunnerWaitsForRuntime(t *testing.T) {
	f := newFixture(t, 2, false)
	rt := nritest.New(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := &Runner{Plugin: f.p, Name: "lpu", Index: "10", Socket: rt.Socket, Log: discard,
		Backoff: backoff.Steps{Min: 10 * time.Millisecond, Max: 50 * time.Millisecond}}
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	time.Sleep(400 * time.Millisecond) // several failed attempts, backoff at its cap
	if f.p.Connected() {
		t.Fatal("connected without a runtime")
	}
	start := time.Now()
	rt.Start(t)
	rt.WaitPlugins(t, 1)
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("connected %v after the runtime appeared, want within the backoff cap", d)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	if f.p.Connected() {
		t.Fatal("still connected after Run returned")
	}
}

// TestRunnerDrainsOnStop: when ctx ends the plugin stops looking connected
// at once (so PreStartContainer refuses new LPU containers), yet still
// injects into a container the runtime creates during the drain, and Run
// returns once the drain is over.
func TestRunnerDrainsOnStop(t *testing.T) {
	f := newFixture(t, 4, false)
	rt := nritest.New(t)
	rt.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const drain = 500 * time.Millisecond
	r := &Runner{Plugin: f.p, Name: "lpu", Index: "10", Socket: rt.Socket, Log: discard, Drain: drain,
		Backoff: backoff.Steps{Min: 10 * time.Millisecond, Max: 50 * time.Millisecond}}
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	rt.WaitPlugins(t, 1)
	for i := 0; !f.p.Connected(); i++ {
		if i == 200 {
			t.Fatal("not connected after 2s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	stopped := time.Now()
	cancel()
	for i := 0; f.p.Connected(); i++ {
		if i == 100 {
			t.Fatal("still connected 100ms after stop")
		}
		time.Sleep(time.Millisecond)
	}
	cctx, ccancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer ccancel()
	rsp, err := rt.CreateContainer(cctx, pod("d", nil), ctr("d", seal(t, f.key, "lpu1")))
	if err != nil {
		t.Fatalf("CreateContainer during the drain: %v", err)
	}
	if time.Since(stopped) >= drain {
		t.Skipf("machine too slow: the create took past the %v drain", drain)
	}
	if got := viewOf(rsp.GetAdjust()).Devices; len(got) != 1 {
		t.Fatalf("container created during the drain got devices %v, want lpu1", got)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
		if d := time.Since(stopped); d < drain {
			t.Fatalf("Run returned %v after stop, before the %v drain", d, drain)
		}
	case <-time.After(drain + 5*time.Second):
		t.Fatal("Run did not return after the drain")
	}
}

package driver

import (
	"context"
	"log/slog"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	checkpoint "github.com/hyperaccel/lpu-node/internal/dracheckpoint"
	"github.com/hyperaccel/lpu-node/pkg/claimstatus"
	"github.com/hyperaccel/lpu-node/pkg/inject"
)

// A wrap-around arc's entry names its LPUs in ring order and their nodes.
func TestStatusEntries(t *testing.T) {
	snap, _ := newStatic(t, ring8()).Snapshot()
	devs := []checkpoint.Device{{Request: "lpus", Pool: node, Device: "ring0-start7-size2"}, {Request: "lpus", Pool: node, Device: "ring0-start2-size3"}}
	got := statusEntries(snap, devs, testLogger(t))
	if len(got) != 2 {
		t.Fatalf("%d entries, want 2", len(got))
	}
	for i, want := range []claimstatus.Data{
		{LPUs: []string{"lpu7", "lpu0"}, Ring: 0, Start: 7, Size: 2, DeviceNodes: []string{"/dev/lpu7", "/dev/lpu0"}},
		{LPUs: []string{"lpu2", "lpu3", "lpu4"}, Ring: 0, Start: 2, Size: 3, DeviceNodes: []string{"/dev/lpu2", "/dev/lpu3", "/dev/lpu4"}},
	} {
		e := got[i]
		if *e.Driver != inject.Driver || *e.Pool != node || *e.Device != devs[i].Device {
			t.Errorf("entry %d names %s/%s/%s", i, *e.Driver, *e.Pool, *e.Device)
		}
		d, err := claimstatus.Parse(e.Data.Raw)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(d.LPUs, want.LPUs) || !slices.Equal(d.DeviceNodes, want.DeviceNodes) || d.Start != want.Start || d.Size != want.Size {
			t.Errorf("entry %d: %+v, want %+v", i, d, want)
		}
	}
	if e := statusEntries(snap, []checkpoint.Device{{Pool: node, Device: "ring3-start0-size2"}}, testLogger(t)); len(e) != 0 {
		t.Errorf("an arc the node lacks got an entry: %s", e[0].Data.Raw)
	}
}

// Opaque config for this driver is refused, naming where it came from;
// another driver's config in the same claim is not ours to judge.
func TestPrepareRefusesOpaqueConfig(t *testing.T) {
	e := newEnv(t, newStatic(t, ring8()))
	c := claim("u1", arc(0, 2))
	c.Status.Allocation.Devices.Config = []resourceapi.DeviceAllocationConfiguration{
		{Source: resourceapi.AllocationConfigSourceClaim, DeviceConfiguration: resourceapi.DeviceConfiguration{
			Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: "gpu.example.com", Parameters: runtime.RawExtension{Raw: []byte(`{}`)}}}},
	}
	if r := e.prepare(c); r.Err != nil {
		t.Fatalf("another driver's config refused: %v", r.Err)
	}
	c = claim("u2", arc(2, 2))
	c.Status.Allocation.Devices.Config = []resourceapi.DeviceAllocationConfiguration{
		{Source: resourceapi.AllocationConfigSourceClass, Requests: []string{"lpus"}, DeviceConfiguration: resourceapi.DeviceConfiguration{
			Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: inject.Driver, Parameters: runtime.RawExtension{Raw: []byte(`{"mode":"fast"}`)}}}},
	}
	r := e.prepare(c)
	if r.Err == nil || !strings.Contains(r.Err.Error(), "takes no config") || !strings.Contains(r.Err.Error(), "device class (requests lpus)") {
		t.Fatalf("Prepare with opaque config: %v", r.Err)
	}
	if _, held := e.d.Prepared()["u2"]; held {
		t.Fatal("refused claim is in the checkpoint")
	}
	if got := counter(t, e.metrics, MetricRefusals, ReasonConfig); got != 1 {
		t.Errorf("refusals{reason=%s} = %v, want 1", ReasonConfig, got)
	}
}

// Prepare never waits for the API server: with it refusing connections or
// accepting and never answering, Prepare returns at once and the writer
// gives up after its bounded attempts.
func TestPrepareDoesNotWaitForAPIServer(t *testing.T) {
	refused, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refusedAddr := refused.Addr().String()
	refused.Close()
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() { // accept and hold: a hung API server
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	for name, addr := range map[string]string{"refused": refusedAddr, "hung": silent.Addr().String()} {
		t.Run(name, func(t *testing.T) {
			client, err := kubernetes.NewForConfig(&rest.Config{Host: "http://" + addr})
			if err != nil {
				t.Fatal(err)
			}
			w := NewStatusWriter(client, StatusOptions{Attempts: 3, FirstBackoff: 10 * time.Millisecond, Timeout: 200 * time.Millisecond, Logger: testLogger(t)})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); w.Run(ctx) }()
			defer func() { cancel(); <-done }()
			e := newEnv(t, newStatic(t, ring8()))
			p := e.d.WithStatus(w)
			start := time.Now()
			res, err := p.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{claim("u1", arc(0, 4))})
			took := time.Since(start)
			if err != nil || res["u1"].Err != nil {
				t.Fatalf("Prepare: %v %v", err, res["u1"].Err)
			}
			if took > 500*time.Millisecond {
				t.Errorf("Prepare took %v with the API server %s", took, name)
			}
			t.Logf("Prepare took %v with the API server %s", took, name)
			deadline := time.Now().Add(10 * time.Second)
			for w.Dropped() != 1 {
				if time.Now().After(deadline) {
					t.Fatalf("writer did not give up: dropped %d, written %d", w.Dropped(), w.Written())
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}

// The newest update of a claim wins: a Prepare then an Unprepare queued
// before the writer runs leave one clear, not a write.
func TestStatusQueueNewestWins(t *testing.T) {
	w := NewStatusWriter(nil, StatusOptions{})
	e := newEnv(t, newStatic(t, ring8()))
	p := e.d.WithStatus(w)
	if res, _ := p.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{claim("u1", arc(0, 2))}); res["u1"].Err != nil {
		t.Fatal(res["u1"].Err)
	}
	if op, _ := w.next(time.Now().Add(time.Hour)); op == nil || len(op.devices) != 1 {
		t.Fatalf("after Prepare: %+v", op)
	} else {
		w.queue(op.namespace, op.name, op.uid, op.devices) // put it back
	}
	if _, err := p.UnprepareResourceClaims(context.Background(), []kubeletplugin.NamespacedObject{
		{NamespacedName: types.NamespacedName{Namespace: "default", Name: "claim-u1"}, UID: "u1"}}); err != nil {
		t.Fatal(err)
	}
	op, _ := w.next(time.Now())
	if op == nil || op.devices != nil || op.uid != "u1" {
		t.Fatalf("after Unprepare: %+v, want one clear of u1", op)
	}
	if op, _ := w.next(time.Now()); op != nil {
		t.Fatalf("a second update queued: %+v", op)
	}
	// A refused Prepare queues nothing.
	c := claim("u2", arc(0, 2)) // overlaps nothing now, but names a foreign pool
	c.Status.Allocation.Devices.Results[0].Pool = "node-b"
	if res, _ := p.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{c}); res["u2"].Err == nil {
		t.Fatal("foreign pool prepared")
	}
	if op, _ := w.next(time.Now()); op != nil {
		t.Fatalf("refused claim queued: %+v", op)
	}
}

func TestStatusBackoffBounded(t *testing.T) {
	w := NewStatusWriter(nil, StatusOptions{FirstBackoff: 100 * time.Millisecond, MaxBackoff: time.Second})
	var got []time.Duration
	for a := 1; a <= 6; a++ {
		got = append(got, w.backoff(a))
	}
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, time.Second, time.Second}
	if !slices.Equal(got, want) {
		t.Fatalf("backoff %v, want %v", got, want)
	}
}

// testLogger logs to the test's output.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

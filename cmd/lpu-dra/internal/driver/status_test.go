package driver

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	resourceapply "k8s.io/client-go/applyconfigurations/resource/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/hyperaccel/lpu-node/cmd/lpu-dra/internal/statuswriter"
	"github.com/hyperaccel/lpu-node/internal/daemontest"
	"github.com/hyperaccel/lpu-node/internal/health/healthtest"
	"github.com/hyperaccel/lpu-node/pkg/inject"
)

// Opaque config for this driver is refused, naming where it came from;
// another driver's config in the same claim is not ours to judge.
func TestPrepareRefusesOpaqueConfig(t *testing.T) {
	e := newEnv(t, healthtest.New(t, healthtest.Ring(8)))
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
			w := statuswriter.New(client, statuswriter.Options{Attempts: 3, FirstBackoff: 10 * time.Millisecond, Timeout: 200 * time.Millisecond, Logger: daemontest.Logger(t)})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); w.Run(ctx) }()
			defer func() { cancel(); <-done }()
			e := newEnv(t, healthtest.New(t, healthtest.Ring(8)))
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

// recordedQueue keeps, per claim, the last status the plugin queued.
type recordedQueue map[types.UID][]*resourceapply.AllocatedDeviceStatusApplyConfiguration

func (q recordedQueue) Queue(_, _ string, uid types.UID, devices []*resourceapply.AllocatedDeviceStatusApplyConfiguration) {
	q[uid] = devices
}

// The plugin queues a prepared claim's entries and, on Unprepare, their
// removal; a refused Prepare queues nothing. (That the newest queued
// update of a claim wins is TestStatusQueueNewestWins in statuswriter.)
func TestStatusPluginQueues(t *testing.T) {
	q := recordedQueue{}
	e := newEnv(t, healthtest.New(t, healthtest.Ring(8)))
	p := &statusPlugin{Driver: e.d, w: q}
	if res, _ := p.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{claim("u1", arc(0, 2))}); res["u1"].Err != nil {
		t.Fatal(res["u1"].Err)
	}
	if devs, ok := q["u1"]; !ok || len(devs) != 1 {
		t.Fatalf("after Prepare: %v queued", q)
	}
	if _, err := p.UnprepareResourceClaims(context.Background(), []kubeletplugin.NamespacedObject{
		{NamespacedName: types.NamespacedName{Namespace: "default", Name: "claim-u1"}, UID: "u1"}}); err != nil {
		t.Fatal(err)
	}
	if devs, ok := q["u1"]; !ok || devs != nil || len(q) != 1 {
		t.Fatalf("after Unprepare: %v queued, want one clear of u1", q)
	}
	// A refused Prepare queues nothing.
	c := claim("u2", arc(0, 2)) // overlaps nothing now, but names a foreign pool
	c.Status.Allocation.Devices.Results[0].Pool = "node-b"
	if res, _ := p.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{c}); res["u2"].Err == nil {
		t.Fatal("foreign pool prepared")
	}
	if _, ok := q["u2"]; ok {
		t.Fatalf("refused claim queued: %v", q)
	}
}

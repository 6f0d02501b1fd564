package driver

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/hyperaccel/lpu-node/internal/daemontest"
	"github.com/hyperaccel/lpu-node/internal/health/healthtest"
	"github.com/hyperaccel/lpu-node/internal/podresources"
	"github.com/hyperaccel/lpu-node/internal/podresources/podresourcestest"
	"github.com/hyperaccel/lpu-node/pkg/alloc"
	"github.com/hyperaccel/lpu-node/pkg/arcslice/arcslicetest"
	"github.com/hyperaccel/lpu-node/pkg/inject"
)

// TestDevicePluginPodsKeepTheirLPUs: on a node moved to DRA while a
// device-plugin pod still runs (the kubelet's real PodResources gRPC API
// shows it holding lpu2 and lpu3), those LPUs leave the published pool and
// Prepare refuses an arc over them; once the pod is gone they come back.
func TestDevicePluginPodsKeepTheirLPUs(t *testing.T) {
	sock := filepath.Join(daemontest.ShortDir(t), "pr.sock")
	srv := podresourcestest.Start(t, sock)
	srv.SetPods(podresourcestest.Holding{Namespace: "team", Pod: "old-job", Container: "main",
		Resource: "hyperaccel.ai/lpu", DeviceIDs: []string{"lpu2", "lpu3"}},
		podresourcestest.Holding{Namespace: "team", Pod: "gpu-job", Container: "main",
			Resource: "example.com/gpu", DeviceIDs: []string{"lpu5"}}) // another resource: not ours
	e := watchedDriver(t, sock, 20*time.Millisecond)
	daemontest.Eventually(t, 5*time.Second, "lpu2 and lpu3 leave the pool", func() bool { return len(publishedArcs(t, e)) == free8(2, 3) })
	for _, a := range publishedArcs(t, e) {
		for i := 0; i < a.Size; i++ {
			if p := (a.Start + i) % 8; p == 2 || p == 3 {
				t.Fatalf("arc %v over a device-plugin pod's LPU is published", a)
			}
		}
	}
	if got := e.prepare(claim("c1", arc(2, 2))); got.Err == nil || !strings.Contains(got.Err.Error(), "device-plugin pod team/old-job") {
		t.Fatalf("Prepare of lpu2-lpu3 = %v, want refused naming the device-plugin pod", got.Err)
	}
	if got := e.prepare(claim("c2", arc(4, 4))); got.Err != nil {
		t.Fatalf("Prepare of a free arc: %v", got.Err)
	}
	var g dto.Metric
	if err := e.metrics.dpHeld.Write(&g); err != nil || g.GetGauge().GetValue() != 2 {
		v := g.GetGauge().GetValue()
		t.Errorf("%s = %v, want 2", MetricDevicePluginHeld, v)
	}
	srv.SetPods() // the device-plugin pod ended
	daemontest.Eventually(t, 5*time.Second, "lpu2 and lpu3 come back", func() bool { return len(publishedArcs(t, e)) == free8(4, 5, 6, 7)+1 })
	if got := e.prepare(claim("c3", arc(2, 2))); got.Err != nil {
		t.Fatalf("Prepare of lpu2-lpu3 after the pod ended: %v", got.Err)
	}
}

// TestUnreadPodResourcesFailsClosed: until the kubelet's PodResources
// answers once, lpu-dra cannot know which LPUs device-plugin pods hold, so
// it publishes no free arc and Prepare refuses a new claim (not_ready);
// once it answers (a device-plugin pod holding lpu2) every other LPU is
// published and a free arc prepares.
func TestUnreadPodResourcesFailsClosed(t *testing.T) {
	sock := filepath.Join(daemontest.ShortDir(t), "pr.sock") // nobody serves it yet
	e := watchedDriver(t, sock, 20*time.Millisecond)
	time.Sleep(100 * time.Millisecond) // several failed reads
	if arcs := publishedArcs(t, e); len(arcs) != 0 {
		t.Fatalf("published %d arcs before PodResources answered, want none: %v", len(arcs), arcs)
	}
	if got := e.prepare(claim("c1", arc(4, 4))); got.Err == nil || !strings.Contains(got.Err.Error(), "PodResources has not answered") {
		t.Fatalf("Prepare before PodResources answered = %v, want refused", got.Err)
	}

	srv := podresourcestest.Start(t, sock)
	srv.SetPods(podresourcestest.Holding{Namespace: "team", Pod: "old-job", Container: "main",
		Resource: "hyperaccel.ai/lpu", DeviceIDs: []string{"lpu2"}})
	daemontest.Eventually(t, 5*time.Second, "every LPU but lpu2 published", func() bool { return len(publishedArcs(t, e)) == free8(2) })
	if got := e.prepare(claim("c2", arc(4, 4))); got.Err != nil {
		t.Fatalf("Prepare of a free arc once PodResources answered: %v", got.Err)
	}
}

// TestPrepareRereadsAStaleDevicePluginView: during a mode switch the
// kubelet may admit a device-plugin pod between two periodic reads (here
// an hour apart). Prepare reads the kubelet's real PodResources again when
// its view is older than DevicePluginMaxAge, so a claim over the LPUs that
// pod now holds is refused, not prepared from the old view.
func TestPrepareRereadsAStaleDevicePluginView(t *testing.T) {
	sock := filepath.Join(daemontest.ShortDir(t), "pr.sock")
	srv := podresourcestest.Start(t, sock)
	e := watchedDriver(t, sock, time.Hour)
	daemontest.Eventually(t, 5*time.Second, "PodResources read once", e.d.devicePluginKnown)
	srv.SetPods(podresourcestest.Holding{Namespace: "team", Pod: "late-job", Container: "main",
		Resource: "hyperaccel.ai/lpu", DeviceIDs: []string{"lpu2", "lpu3"}})
	time.Sleep(DevicePluginMaxAge + 200*time.Millisecond)
	if got := e.prepare(claim("c1", arc(2, 2))); got.Err == nil || !strings.Contains(got.Err.Error(), "device-plugin pod team/late-job") {
		t.Fatalf("Prepare of lpu2-lpu3 with a view %v old = %v, want refused naming the device-plugin pod", DevicePluginMaxAge, got.Err)
	}
	if got := e.prepare(claim("c2", arc(4, 4))); got.Err != nil {
		t.Fatalf("Prepare of a free arc: %v", got.Err)
	}
}

// watchedDriver: a driver on the static 8-LPU ring whose device-plugin view
// is the kubelet PodResources socket sock, read every interval by
// WatchDevicePlugin until the test ends.
func watchedDriver(t *testing.T, sock string, interval time.Duration) *env {
	t.Helper()
	client := podresources.New(sock, "hyperaccel.ai/lpu")
	t.Cleanup(func() { client.Close() })
	m := NewMetrics(node)
	d, err := New(healthtest.New(t, healthtest.Ring(8)), Options{NodeName: node, StateDir: t.TempDir(), CDIDir: filepath.Join(t.TempDir(), "cdi"),
		Inject: inject.Options{}, Metrics: m, DevicePlugin: client, DevicePluginInterval: interval})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.WatchDevicePlugin(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("WatchDevicePlugin: %v", err)
		}
	})
	return &env{t: t, d: d, metrics: m}
}

// publishedArcs is every device of the node's pool now, in order.
func publishedArcs(t *testing.T, e *env) []alloc.Arc {
	res, err := e.d.Resources()
	return arcslicetest.Arcs(t, res, err, node)
}

// free8 counts the arcs of a ring of 8 clear of the held positions.
func free8(held ...int) int { return arcslicetest.FreeArcs(8, held...) }

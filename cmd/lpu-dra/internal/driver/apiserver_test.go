package driver

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/hyperaccel/lpu-node/internal/clustertest"
	"github.com/hyperaccel/lpu-node/internal/daemontest"
	"github.com/hyperaccel/lpu-node/internal/health/healthtest"
	"github.com/hyperaccel/lpu-node/pkg/cordon"
	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/inject"
)

// live is a driver publishing through the real kubelet plugin helper to a
// real v1.37.2 API server (internal/clustertest; skipped when its binaries
// are not built).
type live struct {
	e      *env
	client kubernetes.Interface
}

func startLive(tb testing.TB, inv *device.Inventory) *live {
	return startLiveWith(tb, inv, false)
}

// startLiveWith is startLive, with cordoned a cordon.Watcher of the Node
// as the driver's Options.Cordoned.
func startLiveWith(tb testing.TB, inv *device.Inventory, cordoned bool) *live {
	c := clustertest.Start(tb, clustertest.Options{})
	client, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	tb.Cleanup(cancel)
	if _, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{}); err != nil {
		tb.Fatal(err)
	}
	e := &env{t: tb, stateDir: tb.TempDir(), cdiDir: filepath.Join(tb.TempDir(), "cdi"), devices: healthtest.New(tb, inv)}
	if cordoned {
		w := cordon.NewWatcher(cordon.Options{Client: client, Node: node, Retry: 50 * time.Millisecond})
		go func() { _ = w.Run(ctx) }()
		e.cordoned = w
	}
	e.restart()
	dir := daemontest.ShortDir(tb)
	h, err := kubeletplugin.Start(ctx, e.d, kubeletplugin.DriverName(inject.Driver), kubeletplugin.KubeClient(client),
		kubeletplugin.NodeName(node), kubeletplugin.RegistrarDirectoryPath(dir), kubeletplugin.PluginDataDirectoryPath(dir))
	if err != nil {
		tb.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = e.d.RunPublisher(ctx, h) }()
	tb.Cleanup(func() { cancel(); <-done; h.Stop() })
	return &live{e: e, client: client}
}

// published returns the pool's devices as the API server has them, in
// allocation priority order (slice name, then device order), and the
// number of slices.
func (l *live) published(tb testing.TB) ([]resourceapi.Device, int) {
	list, err := l.client.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	items := list.Items
	slices.SortFunc(items, func(a, b resourceapi.ResourceSlice) int { return strings.Compare(a.Name, b.Name) })
	var devs []resourceapi.Device
	for _, s := range items {
		if s.Spec.Driver == inject.Driver && s.Spec.Pool.Name == node {
			devs = append(devs, s.Spec.Devices...)
		}
	}
	return devs, len(items)
}

// firstOfSize is the name of the first published device of a size.
func firstOfSize(devs []resourceapi.Device, size int64) string {
	for _, d := range devs {
		if v := d.Attributes["size"].IntValue; v != nil && *v == size {
			return d.Name
		}
	}
	return ""
}

func (l *live) waitFor(tb testing.TB, timeout time.Duration, cond func([]resourceapi.Device, int) bool) time.Duration {
	tb.Helper()
	start := time.Now()
	for {
		devs, n := l.published(tb)
		if cond(devs, n) {
			return time.Since(start)
		}
		if time.Since(start) > timeout {
			tb.Fatalf("API server state not reached within %v: %d devices in %d slices", timeout, len(devs), n)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// The real API server accepts the whole pool of a 32×8 node (validation,
// limits, cross-slice counter references): 1824 arcs and 256 count
// devices in 33 device slices and 4 counter slices.
func TestAPIServerAccepts32x8Pool(t *testing.T) {
	inv := &device.Inventory{DriverVersion: "1.4.2"}
	for r := 0; r < 32; r++ {
		var ring []string
		for p := 0; p < 8; p++ {
			i := r*8 + p
			inv.Devices = append(inv.Devices, device.Device{ID: device.ID(i), Index: i, Path: fmt.Sprintf("/dev/lpu%d", i),
				Major: 240, Minor: int64(i), Model: "LPU-X1", Firmware: "2.0.1", NUMANode: r % 2, Health: device.Health{Healthy: true}})
			ring = append(ring, device.ID(i))
		}
		inv.Rings = append(inv.Rings, ring)
	}
	inv.Devices[9].Health = device.Health{Reason: "test"} // taints too
	l := startLive(t, inv)
	took := l.waitFor(t, 60*time.Second, func(d []resourceapi.Device, n int) bool { return len(d) == 1824+256 && n == 33+4 })
	t.Logf("2080 devices in 37 slices stored after %v", took)
}

// After a Prepare the republished order reaches the API server: the first
// 4-arc moves off the prepared LPUs.
func TestRepublishReachesAPIServer(t *testing.T) {
	l := startLive(t, healthtest.Ring(8))
	l.waitFor(t, 30*time.Second, func(d []resourceapi.Device, _ int) bool { return firstOfSize(d, 4) == "ring0-start0-size4" })
	start := time.Now()
	if r := l.e.prepare(claim("u1", arc(0, 4))); r.Err != nil {
		t.Fatal(r.Err)
	}
	l.waitFor(t, 5*time.Second, func(d []resourceapi.Device, _ int) bool { return firstOfSize(d, 4) == "ring0-start4-size4" })
	t.Logf("Prepare → republished order in the API server: %v", time.Since(start))
}

func BenchmarkRepublishReachesAPIServer(b *testing.B) {
	l := startLive(b, healthtest.Ring(8))
	l.waitFor(b, 30*time.Second, func(d []resourceapi.Device, _ int) bool { return firstOfSize(d, 4) == "ring0-start0-size4" })
	var worst time.Duration
	for i := 0; b.Loop(); i++ {
		uid := fmt.Sprintf("u%d", i)
		start := time.Now()
		res, _ := l.e.d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{claim(uid, arc(0, 4))})
		if res[types.UID(uid)].Err != nil {
			b.Fatal(res[types.UID(uid)].Err)
		}
		l.waitFor(b, 5*time.Second, func(d []resourceapi.Device, _ int) bool { return firstOfSize(d, 4) == "ring0-start4-size4" })
		worst = max(worst, time.Since(start))
		b.StopTimer()
		_, _ = l.e.d.UnprepareResourceClaims(context.Background(), []kubeletplugin.NamespacedObject{{UID: types.UID(uid)}})
		l.waitFor(b, 5*time.Second, func(d []resourceapi.Device, _ int) bool { return firstOfSize(d, 4) == "ring0-start0-size4" })
		b.StartTimer()
	}
	b.ReportMetric(float64(worst.Microseconds())/1000, "worst-ms")
}

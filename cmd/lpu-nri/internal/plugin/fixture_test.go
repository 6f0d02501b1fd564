package plugin

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/inventory"
	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/verify/verifytest"
	"github.com/hyperaccel/lpu-node/internal/backoff"
	"github.com/hyperaccel/lpu-node/internal/nritest"
	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/device/devicetest"
	"github.com/hyperaccel/lpu-node/pkg/inject"
)

var discard = verifytest.Discard

// The kit's pods, containers and seals under the names the tests use.
var (
	pod             = verifytest.Pod
	ctr             = verifytest.Ctr
	seal            = verifytest.Seal
	testKey         = verifytest.Key
	lpuDev          = verifytest.LPUDev
	claimCtr        = verifytest.ClaimCtr
	cgroupRule      = verifytest.CgroupRule
	containerdRules = verifytest.ContainerdRules
)

// fixture is a plugin over a fake tree of n devices, lpu5 unhealthy when
// sick is set.
type fixture struct {
	root  string
	key   *inject.Key
	store *inventory.Store
	p     *Plugin
}

func newFixture(t testing.TB, n int, sick bool, opts ...func(*Config)) *fixture {
	t.Helper()
	nd := verifytest.NewNode(t, n, sick)
	f := &fixture{root: nd.Root, key: nd.Key, store: nd.Store}
	cfg := Config{Config: nd.Config()}
	for _, o := range opts {
		o(&cfg)
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.p = p
	return f
}

// connect runs the plugin against rt until the test ends.
func (f *fixture) connect(t testing.TB, rt *nritest.Runtime) {
	t.Helper()
	t.Cleanup(f.start(t, rt))
}

// start runs the plugin against rt until stop is called (an lpu-nri that
// exits).
func (f *fixture) start(t testing.TB, rt *nritest.Runtime) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	r := &Runner{Plugin: f.p, Name: "lpu", Index: "10", Socket: rt.Socket, Log: discard,
		Backoff: backoff.Steps{Min: 20 * time.Millisecond, Max: 200 * time.Millisecond}}
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	return sync.OnceFunc(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("runner: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("runner did not stop within 5s")
		}
	})
}

// view is the part of an adjustment the tests assert, in a printable shape.
type view struct {
	Devices []string // "/dev/lpu2 c 509:2 0666"
	Env     []string // "K=V"
	Mounts  []string // "src -> dst bind ro,..."
	Other   string   // anything else set in the adjustment
}

// verifiedOnly returns the runtime guard's annotation among anns (every
// verified allocation gets one; TestRuntimeGuard asserts it), so views
// show only the rest.
func verifiedOnly(anns map[string]string) map[string]string {
	if v, ok := anns[inject.AnnotationVerified]; ok {
		return map[string]string{inject.AnnotationVerified: v}
	}
	return nil
}

func viewOf(a *api.ContainerAdjustment) view {
	var v view
	if a == nil {
		return v
	}
	for _, d := range a.GetLinux().GetDevices() {
		mode := "-"
		if m := d.GetFileMode(); m != nil {
			mode = fmt.Sprintf("%04o", m.GetValue())
		}
		v.Devices = append(v.Devices, fmt.Sprintf("%s %s %d:%d %s", d.GetPath(), d.GetType(), d.GetMajor(), d.GetMinor(), mode))
	}
	for _, e := range a.GetEnv() {
		v.Env = append(v.Env, e.GetKey()+"="+e.GetValue())
	}
	for _, m := range a.GetMounts() {
		v.Mounts = append(v.Mounts, fmt.Sprintf("%s -> %s %s %s", m.GetSource(), m.GetDestination(), m.GetType(), strings.Join(m.GetOptions(), ",")))
	}
	if len(a.GetAnnotations()) > len(verifiedOnly(a.GetAnnotations())) || len(a.GetArgs()) > 0 || a.GetHooks().String() != "" || len(a.GetRlimits()) > 0 || len(a.GetCDIDevices()) > 0 {
		v.Other = a.String()
	}
	return v
}

func dev(i int) string { return fmt.Sprintf("/dev/lpu%d c %d:%d 0666", i, device.DefaultMajor, i) }

const driverEnv = inject.EnvDriverVersion + "=" + devicetest.DriverVersion
const libMount = "/usr/lib/lpu -> /usr/lib/lpu bind ro,nosuid,nodev,rbind,rprivate"

func counter(t testing.TB, c prometheus.Collector) float64 {
	t.Helper()
	m, ok := c.(prometheus.Metric)
	if !ok {
		t.Fatalf("%T is not a single metric", c)
	}
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		t.Fatal(err)
	}
	switch {
	case d.Counter != nil:
		return d.Counter.GetValue()
	case d.Gauge != nil:
		return d.Gauge.GetValue()
	case d.Histogram != nil:
		return float64(d.Histogram.GetSampleCount())
	}
	t.Fatalf("unsupported metric %v", &d)
	return 0
}

package daemon

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hyperaccel/lpu-node/internal/daemontest"
	"github.com/hyperaccel/lpu-node/internal/devicemetrics/devicemetricstest"
	"github.com/hyperaccel/lpu-node/internal/nfd"
	"github.com/hyperaccel/lpu-node/pkg/device"
)

// TestRunReportsTheNode: lpu-dra exports the node-level series a
// device-plugin node exports (health, info, telemetry, build) and writes
// the NFD feature file with the device plugin's content for the same
// inventory (nfd.Features of what discovery finds; the device plugin's
// daemon test pins the same lines on the same simulated node).
func TestRunReportsTheNode(t *testing.T) {
	p, _ := params(t)
	simulate(t, p.Config, 16)
	p.Config.Metrics.Address = daemontest.FreeAddr(t)
	p.Options.NFD = nfd.Flag{File: filepath.Join(t.TempDir(), "features.d", "lpu"), Given: true}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, p) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	}()

	url := "http://" + p.Config.Metrics.Address + "/metrics"
	var body string
	daemontest.Eventually(t, 10*time.Second, "device series on /metrics", func() bool {
		_, body = daemontest.Get(url)
		_, ok := daemontest.Value(body, "lpu_device_healthy", `device="lpu15"`)
		return ok
	})
	for i := range 16 {
		dev := `device="lpu` + strconv.Itoa(i) + `"`
		if v, ok := daemontest.Value(body, "lpu_device_healthy", dev, `node="node-a"`); !ok || v != 1 {
			t.Errorf("lpu_device_healthy{%s} = %v (found %v), want 1", dev, v, ok)
		}
		if v, ok := daemontest.Value(body, "lpu_device_info", dev, `node="node-a"`); !ok || v != 1 {
			t.Errorf("lpu_device_info{%s} = %v (found %v), want 1", dev, v, ok)
		}
		if _, ok := daemontest.Value(body, "lpu_temperature_celsius", dev, `pod=""`, `namespace=""`, `container=""`); !ok {
			t.Errorf("no lpu_temperature_celsius{%s}", dev)
		}
	}
	if v, ok := daemontest.Value(body, "lpu_build_info", `daemon="lpu-dra"`, `version="test"`); !ok || v != 1 {
		t.Errorf("lpu_build_info{daemon=lpu-dra} = %v (found %v)\n%s", v, ok, body)
	}
	// The chart's tests check alerts and panels against this list.
	devicemetricstest.Check(t, "lpu-dra", body)

	inv, err := device.NewSysfs(p.Config.Root, p.Config.DiscoveryOptions()...).Discover(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	lines := nfd.Features(p.Config.ResourceName, inv)
	want := strings.Join(lines, "\n") + "\n"
	for _, l := range []string{"hyperaccel.ai/lpu.count=16", "hyperaccel.ai/lpu.rings=2", "hyperaccel.ai/lpu.largest-ring=8", "hyperaccel.ai/lpu.model=HyperAccel-LPU-sim"} {
		if !strings.Contains(want, l+"\n") {
			t.Fatalf("the device plugin's feature %s is not in %q", l, want)
		}
	}
	var got string
	daemontest.Eventually(t, 5*time.Second, "NFD feature file", func() bool {
		b, err := os.ReadFile(p.Options.NFD.File)
		got = string(b)
		return err == nil
	})
	head, rest, _ := strings.Cut(got, "\n")
	if !strings.HasPrefix(head, "# +expiry-time=") || rest != want {
		t.Fatalf("NFD file\n%s\nwant an expiry line, then\n%s", got, want)
	}
}

package devicemetrics

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hyperaccel/lpu-node/internal/daemontest"
	"github.com/hyperaccel/lpu-node/internal/health"
	"github.com/hyperaccel/lpu-node/internal/podresources"
	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/device/devicetest"
)

// monitor runs a health monitor over a fake tree of n devices with every
// telemetry file, lpu1's power file removed.
func monitor(t *testing.T, n int) (*health.Monitor, *device.Sysfs) {
	t.Helper()
	root := devicetest.NewTree(t, devicetest.TelemetryRows(n)...)
	devicetest.RemoveAttr(t, root, "lpu1", device.AttrPower)
	sysfs := device.NewSysfs(root)
	mon := health.New(sysfs, health.Options{ResyncInterval: time.Hour})
	daemontest.Run(t, mon.Run)
	<-mon.Ready()
	return mon, sysfs
}

// holders is a HolderLister with a fixed answer, counting its calls.
type holders struct {
	m     map[string]podresources.Holder
	err   error
	calls int
}

func (h *holders) Holders(context.Context) (map[string]podresources.Holder, error) {
	h.calls++
	return h.m, h.err
}

func TestCollector(t *testing.T) {
	mon, sysfs := monitor(t, 2)
	snap, _ := mon.Snapshot()
	dev0, _ := snap.Inventory.Device("lpu0")
	info := `lpu_device_info{device="lpu0",driver="` + snap.Inventory.DriverVersion + `",firmware="` + dev0.Firmware + `",model="` + dev0.Model + `",node="n1"} 1`
	tests := map[string]struct {
		holders *holders
		want    []string // lines the exposition holds
		absent  []string // name{labels prefixes the exposition must not hold
	}{
		"no holder lister (lpu-dra)": {
			want: []string{
				`lpu_device_healthy{device="lpu0",node="n1"} 1`,
				info,
				`lpu_utilization_percent{container="",device="lpu1",namespace="",node="n1",pod=""} 10`,
				`lpu_temperature_celsius{container="",device="lpu0",namespace="",node="n1",pod=""} 45.5`,
				`lpu_power_watts{container="",device="lpu0",namespace="",node="n1",pod=""} 75`,
				`lpu_memory_total_bytes{container="",device="lpu0",namespace="",node="n1",pod=""} 1.7179869184e+10`,
				`lpu_memory_used_bytes{container="",device="lpu0",namespace="",node="n1",pod=""} 1024`,
			},
			absent: []string{`lpu_power_watts{container="",device="lpu1"`},
		},
		"holder known": {
			holders: &holders{m: map[string]podresources.Holder{"lpu1": {Namespace: "ml", Pod: "train-0", Container: "main"}}},
			want:    []string{`lpu_utilization_percent{container="main",device="lpu1",namespace="ml",node="n1",pod="train-0"} 10`},
		},
		"holders unknown": {
			holders: &holders{err: errors.New("no socket")},
			want:    []string{`lpu_utilization_percent{container="",device="lpu1",namespace="",node="n1",pod=""} 10`},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			opts := Options{Node: "n1", Daemon: "lpu-dra", Version: "1.2.3", Devices: mon, Telemetry: sysfs}
			if tc.holders != nil {
				opts.Holders = tc.holders
			}
			reg := prometheus.NewRegistry()
			reg.MustRegister(New(opts))
			body := exposition(t, reg)
			tc.want = append(tc.want, `lpu_build_info{daemon="lpu-dra",goversion="go`)
			for _, w := range tc.want {
				if !strings.Contains(body, w) {
					t.Errorf("missing %s\n%s", w, body)
				}
			}
			for _, a := range tc.absent {
				if strings.Contains(body, a) {
					t.Errorf("reported %s\n%s", a, body)
				}
			}
			if tc.holders != nil && tc.holders.calls != 1 {
				t.Errorf("%d Holders calls for one scrape, want 1", tc.holders.calls)
			}
		})
	}
}

// TestDevicesFollowHealth: a device going unhealthy shows at the next
// scrape.
func TestDevicesFollowHealth(t *testing.T) {
	root := devicetest.NewTree(t, devicetest.Row{Index: 0})
	mon := health.New(device.NewSysfs(root), health.Options{ResyncInterval: time.Hour, ProbeInterval: 10 * time.Millisecond})
	daemontest.Run(t, mon.Run)
	<-mon.Ready()
	reg := prometheus.NewRegistry()
	reg.MustRegister(New(Options{Node: "n1", Devices: mon}))
	devicetest.SetStatus(t, root, "lpu0", "ECC_ERROR")
	deadline := time.Now().Add(2 * time.Second)
	for !strings.Contains(exposition(t, reg), `lpu_device_healthy{device="lpu0",node="n1"} 0`) {
		if time.Now().After(deadline) {
			t.Fatalf("lpu0 still healthy after ECC_ERROR\n%s", exposition(t, reg))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestNames(t *testing.T) {
	mon, sysfs := monitor(t, 2)
	reg := prometheus.NewRegistry()
	reg.MustRegister(New(Options{Node: "n1", Daemon: "lpu-dra", Devices: mon, Telemetry: sysfs}))
	got, err := Names(reg)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"lpu_build_info", "lpu_device_healthy", "lpu_device_info", "lpu_memory_total_bytes",
		"lpu_memory_used_bytes", "lpu_power_watts", "lpu_temperature_celsius", "lpu_utilization_percent"}
	if !slices.Equal(got, want) {
		t.Fatalf("Names = %v, want %v", got, want)
	}
	// Without devices only the build is known.
	reg = prometheus.NewRegistry()
	reg.MustRegister(New(Options{Daemon: "lpu-dra"}))
	if got, _ := Names(reg); !slices.Equal(got, []string{"lpu_build_info"}) {
		t.Fatalf("Names without devices = %v", got)
	}
}

// exposition is the registry's text format.
func exposition(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	var b strings.Builder
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+`="`+l.GetValue()+`"`)
			}
			b.WriteString(f.GetName() + "{" + strings.Join(labels, ",") + "} " + strconv.FormatFloat(m.GetGauge().GetValue(), 'g', -1, 64) + "\n")
		}
	}
	return b.String()
}

// (the series a registry exports, for docs and the chart's tests).
func Names(g prometheus.Gatherer) ([]string, error) {
	fams, err := g.Gather()
	if err != nil {
		return nil, fmt.Errorf("gather: %w", err)
	}
	names := make([]string, 0, len(fams))
	for _, f := range fams {
		names = append(names, f.GetName())
	}
	slices.Sort(names)
	return names, nil
}

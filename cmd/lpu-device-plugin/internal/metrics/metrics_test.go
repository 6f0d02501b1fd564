package metrics

import (
	"context"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hyperaccel/lpu-node/internal/daemontest"
	"github.com/hyperaccel/lpu-node/internal/devicemetrics/devicemetricstest"
	"github.com/hyperaccel/lpu-node/internal/health"
	"github.com/hyperaccel/lpu-node/internal/metricsserver"
	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/device/devicesim"
	"github.com/hyperaccel/lpu-node/pkg/device/devicetest"

	"github.com/hyperaccel/lpu-node/internal/podresources"
	"github.com/hyperaccel/lpu-node/internal/podresources/podresourcestest"
)

func serve(t *testing.T, m *Metrics, healthz, readyz metricsserver.Check) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- metricsserver.ServeLimited(ctx, ln, metricsserver.Handler(m.Registry, healthz, readyz), nil, metricsserver.Limits{})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return "http://" + ln.Addr().String()
}

func TestDeviceMetrics(t *testing.T) {
	root := devicetest.NewTree(t, devicetest.TelemetryRows(8)...)
	devicetest.RemoveAttr(t, root, "lpu7", device.AttrPower)
	sysfs := device.NewSysfs(root)
	mon := health.New(sysfs, health.Options{ResyncInterval: time.Hour, ProbeInterval: 10 * time.Millisecond})
	daemontest.Run(t, mon.Run)
	<-mon.Ready()

	sock := filepath.Join(daemontest.ShortDir(t), "pr.sock")
	pr := podresourcestest.Start(t, sock)
	pr.SetPods(podresourcestest.Holding{Namespace: "ml", Pod: "train-0", Container: "main", Resource: "hyperaccel.ai/lpu", DeviceIDs: []string{"lpu2", "lpu3"}},
		podresourcestest.Holding{Namespace: "ml", Pod: "other", Container: "c", Resource: "example.com/gpu", DeviceIDs: []string{"lpu4"}})
	holders := podresources.New(sock, "hyperaccel.ai/lpu")
	defer holders.Close()

	m := New(Options{Node: "n1", Devices: mon, Telemetry: sysfs, Holders: holders, Version: "1.2.3"})
	url := serve(t, m, nil, nil)
	_, body := daemontest.Get(url + "/metrics")
	// Every series shows in this scrape (holders known, telemetry read):
	// the chart's tests check alerts and panels against this list.
	devicemetricstest.Check(t, "lpu-device-plugin", body)
	snap, _ := mon.Snapshot()
	dev1, ok := snap.Inventory.Device("lpu1")
	if !ok {
		t.Fatal("no lpu1 in the inventory")
	}
	driver := snap.Inventory.DriverVersion

	checks := map[string]struct {
		name   string
		labels []string
		want   float64
	}{
		"healthy":          {"lpu_device_healthy", []string{`device="lpu0"`, `node="n1"`}, 1},
		"utilization":      {"lpu_utilization_percent", []string{`device="lpu5"`}, 50},
		"memory used":      {"lpu_memory_used_bytes", []string{`device="lpu1"`}, 1024},
		"memory total":     {"lpu_memory_total_bytes", []string{`device="lpu1"`}, 17179869184},
		"temperature":      {"lpu_temperature_celsius", []string{`device="lpu1"`}, 45.5},
		"power":            {"lpu_power_watts", []string{`device="lpu1"`}, 75},
		"holder labels":    {"lpu_utilization_percent", []string{`device="lpu3"`, `pod="train-0"`, `namespace="ml"`, `container="main"`}, 30},
		"free has no pod":  {"lpu_utilization_percent", []string{`device="lpu4"`, `pod=""`}, 40},
		"largest free arc": {"lpu_largest_free_arc", []string{`ring="0"`}, 6}, // 4..7,0,1
		"allocated":        {"lpu_device_allocated", []string{`device="lpu3"`, `node="n1"`}, 1},
		"not allocated":    {"lpu_device_allocated", []string{`device="lpu4"`}, 0}, // held for another resource
		"device info":      {"lpu_device_info", []string{`device="lpu1"`, `node="n1"`, `firmware="` + dev1.Firmware + `"`, `driver="` + driver + `"`}, 1},
		"build info":       {"lpu_build_info", []string{`daemon="lpu-device-plugin"`, `version="1.2.3"`, `goversion="go`}, 1},
	}
	for name, c := range checks {
		t.Run(name, func(t *testing.T) {
			got, ok := daemontest.Value(body, c.name, c.labels...)
			if !ok || got != c.want {
				t.Fatalf("%s%v = %v (found %v), want %v\n%s", c.name, c.labels, got, ok, c.want, body)
			}
		})
	}
	if _, ok := daemontest.Value(body, "lpu_power_watts", `device="lpu7"`); ok {
		t.Fatal("power reported for lpu7 without a power file")
	}

	// Values follow the tree and the kubelet at the next scrape.
	devicetest.SetStatus(t, root, "lpu0", "ECC_ERROR")
	devicetest.WriteAttr(t, root, "lpu1", device.AttrTemperature, "80000\n")
	pr.SetPods()
	deadline := time.Now().Add(time.Second)
	for {
		_, body = daemontest.Get(url + "/metrics")
		h, _ := daemontest.Value(body, "lpu_device_healthy", `device="lpu0"`)
		temp, _ := daemontest.Value(body, "lpu_temperature_celsius", `device="lpu1"`)
		arc, _ := daemontest.Value(body, "lpu_largest_free_arc", `ring="0"`)
		if h == 0 && temp == 80 && arc == 7 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after changes: healthy=%v temp=%v arc=%v, want 0 80 7", h, temp, arc)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, ok := daemontest.Value(body, "lpu_utilization_percent", `device="lpu3"`, `pod="train-0"`); ok {
		t.Fatal("holder labels kept after the pod left")
	}
	if v, _ := daemontest.Value(body, "lpu_device_allocated", `device="lpu3"`); v != 0 {
		t.Fatal("lpu3 still allocated after the pod left")
	}
}

func TestPodResourcesUnavailable(t *testing.T) {
	root := devicetest.NewTree(t, devicetest.Row{Index: 0, Files: map[string]string{device.AttrUtilization: "12\n"}})
	sysfs := device.NewSysfs(root)
	mon := health.New(sysfs, health.Options{ResyncInterval: time.Hour})
	daemontest.Run(t, mon.Run)
	<-mon.Ready()
	holders := podresources.New(filepath.Join(daemontest.ShortDir(t), "absent.sock"), "hyperaccel.ai/lpu")
	defer holders.Close()
	m := New(Options{Node: "n1", Devices: mon, Telemetry: sysfs, Holders: holders, HoldersTimeout: 100 * time.Millisecond})
	url := serve(t, m, nil, nil)
	began := time.Now()
	_, body := daemontest.Get(url + "/metrics")
	if d := time.Since(began); d > 2*time.Second {
		t.Fatalf("scrape took %v with PodResources absent", d)
	}
	if v, ok := daemontest.Value(body, "lpu_utilization_percent", `device="lpu0"`, `pod=""`, `namespace=""`); !ok || v != 12 {
		t.Fatalf("utilization %v %v, want 12 with empty holder labels\n%s", v, ok, body)
	}
	if _, ok := daemontest.Value(body, "lpu_device_allocated"); ok {
		t.Fatal("lpu_device_allocated reported while PodResources is unavailable (it would claim every LPU free)")
	}
}

// TestOrionTelemetry: on the xilinx backend temperature, power and memory
// total are reported, utilisation and memory used are absent (no sysfs
// source), never a made-up zero.
func TestOrionTelemetry(t *testing.T) {
	root := t.TempDir()
	if err := devicesim.Write(root, devicesim.Spec{Devices: 2, Rings: 1, Backend: device.BackendXilinx}); err != nil {
		t.Fatal(err)
	}
	sysfs := device.NewSysfs(root, device.WithDiscovery(device.Discovery{Backend: device.BackendXilinx}))
	mon := health.New(sysfs, health.Options{ResyncInterval: time.Hour})
	daemontest.Run(t, mon.Run)
	<-mon.Ready()
	holders := podresources.New(filepath.Join(daemontest.ShortDir(t), "absent.sock"), "hyperaccel.ai/lpu")
	defer holders.Close()
	m := New(Options{Node: "n1", Devices: mon, Telemetry: sysfs, Holders: holders, HoldersTimeout: 100 * time.Millisecond})
	_, body := daemontest.Get(serve(t, m, nil, nil) + "/metrics")
	for name, want := range map[string]float64{"lpu_temperature_celsius": 42, "lpu_power_watts": 22.5, "lpu_memory_total_bytes": 16 << 30, "lpu_device_healthy": 1} {
		if v, ok := daemontest.Value(body, name, `device="lpu1"`); !ok || v != want {
			t.Errorf("%s = %v (found %v), want %v", name, v, ok, want)
		}
	}
	for _, name := range []string{"lpu_utilization_percent", "lpu_memory_used_bytes"} {
		if _, ok := daemontest.Value(body, name, `device="lpu1"`); ok {
			t.Errorf("%s reported on Orion, which has no source for it", name)
		}
	}
}

func TestRecorderAndProbes(t *testing.T) {
	m := New(Options{Node: "n1"})
	var registered atomic.Bool
	url := serve(t, m, func() error {
		if !registered.Load() {
			return errString("not registered with kubelet")
		}
		return nil
	}, func() error { return nil })
	_, body := daemontest.Get(url + "/metrics")
	for _, r := range Results {
		if v, ok := daemontest.Value(body, "lpu_allocations_total", `result="`+r+`"`); !ok || v != 0 {
			t.Fatalf("lpu_allocations_total{result=%q} = %v %v, want 0 from the start", r, v, ok)
		}
	}
	m.Allocation("contiguous")
	m.Allocation("refused")
	m.Allocation("refused")
	m.Registered()
	m.AllocateDuration(time.Millisecond)
	m.PreferredDuration(time.Millisecond)
	_, body = daemontest.Get(url + "/metrics")
	for name, c := range map[string]struct {
		metric string
		labels []string
		want   float64
	}{
		"contiguous":    {"lpu_allocations_total", []string{`result="contiguous"`}, 1},
		"refused":       {"lpu_allocations_total", []string{`result="refused"`}, 2},
		"registrations": {"lpu_registrations_total", nil, 1},
		"allocate":      {"lpu_allocate_duration_seconds_count", nil, 1},
		"preferred":     {"lpu_preferred_allocation_duration_seconds_count", nil, 1},
	} {
		if v, ok := daemontest.Value(body, c.metric, c.labels...); !ok || v != c.want {
			t.Errorf("%s: %s = %v %v, want %v", name, c.metric, v, ok, c.want)
		}
	}
	if code, body := daemontest.Get(url + "/healthz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "not registered") {
		t.Fatalf("/healthz = %d %q, want 503 with the reason", code, body)
	}
	registered.Store(true)
	if code, _ := daemontest.Get(url + "/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz = %d, want 200", code)
	}
	if code, _ := daemontest.Get(url + "/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz = %d, want 200", code)
	}
}

type errString string

func (e errString) Error() string { return string(e) }

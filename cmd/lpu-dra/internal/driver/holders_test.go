package driver

import (
	"context"
	"maps"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hyperaccel/lpu-node/internal/devicemetrics"
	"github.com/hyperaccel/lpu-node/internal/health/healthtest"
	"github.com/hyperaccel/lpu-node/internal/podresources"
	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/device/devicesim"
)

// temperatureHolders scrapes lpu_temperature_celsius as lpu-dra's registry
// exports it (the driver as the collector's HolderLister, telemetry read
// from a simulated sysfs tree) and returns each device's pod labels as
// "namespace/pod/container" ("//" when unlabelled).
func temperatureHolders(t *testing.T, d *Driver, root string) map[string]string {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(devicemetrics.New(devicemetrics.Options{Node: node, Daemon: "lpu-dra", Version: "test",
		Devices: healthtest.New(t, healthtest.Ring(8)), Telemetry: device.NewSysfs(root), Holders: d}))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, mf := range mfs {
		if mf.GetName() != "lpu_temperature_celsius" {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			out[l["device"]] = l["namespace"] + "/" + l["pod"] + "/" + l["container"]
		}
	}
	if len(out) != 8 {
		t.Fatalf("lpu_temperature_celsius for %d devices, want 8: %v", len(out), out)
	}
	return out
}

// TestTelemetryNamesTheClaimsPods: in mode dra the telemetry of a prepared
// claim's LPUs carries the pod its reservedFor names (the first by name
// for a shared claim), follows reservedFor, comes back after a restart
// once the reservation watcher re-reads the claim, and goes with
// unprepare; admin-access claims label nothing; LPUs device-plugin pods
// still hold carry that container.
func TestTelemetryNamesTheClaimsPods(t *testing.T) {
	root := t.TempDir()
	if err := devicesim.WriteNode(root, 8, device.BackendLPU); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, healthtest.New(t, healthtest.Ring(8)))
	unheld := func() map[string]string {
		m := map[string]string{}
		for i := range 8 {
			m[device.ID(i)] = "//"
		}
		return m
	}
	want := unheld()
	check := func(step string) {
		t.Helper()
		if got := temperatureHolders(t, e.d, root); !maps.Equal(got, want) {
			t.Fatalf("%s: holders %v, want %v", step, got, want)
		}
	}
	check("nothing prepared")

	c := claim("u1", arc(0, 2))
	if r := e.prepare(c); r.Err != nil {
		t.Fatal(r.Err)
	}
	want["lpu0"], want["lpu1"] = "default/pod-u1/", "default/pod-u1/"
	check("prepared")

	admin := claim("adm", arc(0, 2))
	admin.Status.Allocation.Devices.Results[0].AdminAccess = new(true)
	if r := e.prepare(admin); r.Err != nil {
		t.Fatal(r.Err)
	}
	check("an admin-access claim on the same LPUs")

	shared := reservedFor(c, "pod-uid-u1", "pod-b", "pod-a") // names p-pod-uid-u1, p-pod-b, p-pod-a
	if _, err := e.d.SyncReservedFor(context.Background(), "u1", shared); err != nil {
		t.Fatal(err)
	}
	want["lpu0"], want["lpu1"] = "default/p-pod-a/", "default/p-pod-a/"
	check("shared by three pods")

	e.restart()
	want["lpu0"], want["lpu1"] = "//", "//"
	check("restarted, before the watcher re-read the claim")
	if _, err := e.d.SyncReservedFor(context.Background(), "u1", reservedFor(c, "pod-b")); err != nil {
		t.Fatal(err)
	}
	want["lpu0"], want["lpu1"] = "default/p-pod-b/", "default/p-pod-b/"
	check("re-read after the restart")

	e.d.setDevicePluginHeld(map[string]podresources.Holder{"lpu6": {Namespace: "team", Pod: "old-job", Container: "main"}})
	want["lpu6"] = "team/old-job/main"
	check("a device-plugin pod still holds lpu6")

	if err := e.unprepare("u1"); err != nil {
		t.Fatal(err)
	}
	want["lpu0"], want["lpu1"] = "//", "//"
	check("unprepared")
	e.d.mu.Lock()
	defer e.d.mu.Unlock()
	if _, ok := e.d.podNames["u1"]; ok {
		t.Errorf("the unprepared claim's pod names are still kept: %v", e.d.podNames)
	}
}

package nriedit

import (
	"reflect"
	"testing"

	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/inject"
)

func dev(i int) device.Device {
	return device.Device{ID: device.ID(i), Index: i, Path: "/dev/" + device.ID(i), Major: 240, Minor: int64(i), Health: device.Health{Healthy: true}}
}

func TestAdjustment(t *testing.T) {
	e := inject.ForDevices([]device.Device{dev(7), dev(0)}, "2.1.0", inject.Options{Mounts: []inject.Mount{{HostPath: "/usr/lib/lpu"}}, Env: map[string]string{"X": "a=b"}})
	adj := Adjustment(e)
	devs := adj.GetLinux().GetDevices()
	if len(devs) != 2 {
		t.Fatalf("devices = %v", devs)
	}
	for i, want := range []device.Device{dev(7), dev(0)} {
		d := devs[i]
		if d.Path != want.Path || d.Type != "c" || d.Major != want.Major || d.Minor != want.Minor || d.FileMode.GetValue() != 0o666 {
			t.Errorf("device %d = %v", i, d)
		}
		if d.AccessString() != "rw" {
			t.Errorf("device %d cgroup access %q, want rw", i, d.AccessString())
		}
	}
	m := adj.GetMounts()
	if len(m) != 1 || m[0].Source != "/usr/lib/lpu" || m[0].Destination != "/usr/lib/lpu" || m[0].Type != "bind" ||
		!reflect.DeepEqual(m[0].Options, []string{"ro", "nosuid", "nodev", "rbind", "rprivate"}) {
		t.Errorf("mounts = %v", m)
	}
	var env []string
	for _, kv := range adj.GetEnv() {
		env = append(env, kv.Key+"="+kv.Value)
	}
	if !reflect.DeepEqual(env, []string{"LPU_VISIBLE_DEVICES=7,0", "NUM_LPU_DEVICES=2", "LPU_DRIVER_VERSION=2.1.0", "X=a=b"}) {
		t.Errorf("env = %q", env)
	}
}

// TestAdjustmentUnallocated: a container without an allocation gets no
// device or mount and LPU_VISIBLE_DEVICES=none, overriding its image's.
func TestAdjustmentUnallocated(t *testing.T) {
	adj := Adjustment(inject.Unallocated())
	if len(adj.GetLinux().GetDevices()) != 0 || len(adj.GetMounts()) != 0 {
		t.Errorf("adjustment adds devices or mounts: %v", adj)
	}
	env := adj.GetEnv()
	if len(env) != 1 || env[0].Key != "LPU_VISIBLE_DEVICES" || env[0].Value != "none" {
		t.Errorf("adjustment env = %v", env)
	}
}

// BenchmarkForDevicesAdjustment: building the edits for an 8-LPU allocation
// and rendering them to an NRI adjustment (lpu-nri's work per container).
func BenchmarkForDevicesAdjustment(b *testing.B) {
	devs := make([]device.Device, 0, 8)
	for _, i := range []int{4, 5, 6, 7, 0, 1, 2, 3} {
		devs = append(devs, dev(i))
	}
	opts := inject.Options{Mounts: []inject.Mount{{HostPath: "/usr/lib/lpu"}}, Env: map[string]string{"LPU_LOG_LEVEL": "info"}}
	b.ReportAllocs()
	for b.Loop() {
		if adj := Adjustment(inject.ForDevices(devs, "2.1.0", opts)); len(adj.Linux.Devices) != 8 {
			b.Fatal("wrong device count")
		}
	}
}

package inject

import (
	"testing"

	"github.com/hyperaccel/lpu-node/pkg/device"
)

// BenchmarkForDevicesAdjustment: building the edits for an 8-LPU allocation
// and rendering them to an NRI adjustment (lpu-nri's work per container).
func BenchmarkForDevicesAdjustment(b *testing.B) {
	inv := inventory(8, 8, 0)
	devs := make([]device.Device, 0, 8)
	for _, i := range []int{4, 5, 6, 7, 0, 1, 2, 3} {
		devs = append(devs, inv.Devices[i])
	}
	opts := Options{Mounts: []Mount{{HostPath: "/usr/lib/lpu"}}, Env: map[string]string{"LPU_LOG_LEVEL": "info"}}
	b.ReportAllocs()
	for b.Loop() {
		if adj := ForDevices(devs, inv.DriverVersion, opts).Adjustment(); len(adj.Linux.Devices) != 8 {
			b.Fatal("wrong device count")
		}
	}
}

// BenchmarkSpec: rendering the CDI spec of an 8-LPU node.
func BenchmarkSpec(b *testing.B) {
	inv := inventory(8, 8, 0)
	opts := Options{Mounts: []Mount{{HostPath: "/usr/lib/lpu"}}, Env: map[string]string{"LPU_LOG_LEVEL": "info"}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Spec(inv, opts); err != nil {
			b.Fatal(err)
		}
	}
}

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

// BenchmarkOpen: verifying and parsing an 8-LPU allocation annotation.
func BenchmarkOpen(b *testing.B) {
	k := testKey(b, 3)
	ann := k.Annotations([]string{"lpu4", "lpu5", "lpu6", "lpu7", "lpu0", "lpu1", "lpu2", "lpu3"})
	b.ReportAllocs()
	for b.Loop() {
		if _, err := k.Open(ann); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAnnotations: sealing an 8-LPU allocation (the device plugin's
// Allocate).
func BenchmarkAnnotations(b *testing.B) {
	k := testKey(b, 3)
	ids := []string{"lpu4", "lpu5", "lpu6", "lpu7", "lpu0", "lpu1", "lpu2", "lpu3"}
	b.ReportAllocs()
	for b.Loop() {
		_ = k.Annotations(ids)
	}
}

// BenchmarkOpenAllocation: verifying and parsing an 8-LPU allocation with
// its allocation ID (lpu-nri with tracing).
func BenchmarkOpenAllocation(b *testing.B) {
	k := testKey(b, 3)
	ann, err := k.AnnotationsWithID([]string{"lpu4", "lpu5", "lpu6", "lpu7", "lpu0", "lpu1", "lpu2", "lpu3"}, NewAllocationID())
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if a, err := k.OpenAllocation(ann); err != nil || a.ID == "" {
			b.Fatal(a, err)
		}
	}
}

// BenchmarkAnnotationsWithID: sealing an 8-LPU allocation and a fresh
// allocation ID (the device plugin's Allocate with tracing).
func BenchmarkAnnotationsWithID(b *testing.B) {
	k := testKey(b, 3)
	ids := []string{"lpu4", "lpu5", "lpu6", "lpu7", "lpu0", "lpu1", "lpu2", "lpu3"}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := k.AnnotationsWithID(ids, NewAllocationID()); err != nil {
			b.Fatal(err)
		}
	}
}

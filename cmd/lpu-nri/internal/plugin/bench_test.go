package plugin

import (
	"context"
	"io"
	"log/slog"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"

	"github.com/hyperaccel/lpu-node/internal/nritest"
)

// The handler benchmarks run the CreateContainer handler in-process
// (no socket I/O): trust rules, inventory lookup, rendering, metrics and a
// JSON log record into io.Discard.

func benchFixture(b *testing.B) *fixture {
	f := newFixture(b, 8, false, func(c *Config) {
		c.Log = slog.New(slog.NewJSONHandler(io.Discard, nil))
	})
	return f
}

func benchCreate(b *testing.B, f *fixture, p *api.PodSandbox, c *api.Container, wantErr bool) {
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuTime()
	for b.Loop() {
		_, _, err := f.p.CreateContainer(ctx, p, c)
		if (err != nil) != wantErr {
			b.Fatal(err)
		}
	}
	reportCPU(b, cpu)
}

// cpuTime is the process's user+system CPU time. On a shared, loaded
// machine ns/op (wall time) includes waiting for a CPU; cpu-ns/op (CPU time
// of the whole process, GC included, per op) does not.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
}

func BenchmarkCreateContainerValid4(b *testing.B) {
	f := benchFixture(b)
	benchCreate(b, f, pod("b", map[string]string{"app": "x"}),
		ctr("b", seal(b, f.key, "lpu6", "lpu7", "lpu0", "lpu1"), "PATH=/bin"), false)
}

func BenchmarkCreateContainerValid8(b *testing.B) {
	f := benchFixture(b)
	ids := []string{"lpu0", "lpu1", "lpu2", "lpu3", "lpu4", "lpu5", "lpu6", "lpu7"}
	benchCreate(b, f, pod("b", nil), ctr("b", seal(b, f.key, ids...)), false)
}

func BenchmarkCreateContainerUnallocated(b *testing.B) {
	f := benchFixture(b)
	benchCreate(b, f, pod("b", nil), ctr("b", map[string]string{"io.kubernetes.cri.container-type": "container"}, "LPU_VISIBLE_DEVICES=0"), false)
}

func BenchmarkCreateContainerForged(b *testing.B) {
	f := benchFixture(b)
	benchCreate(b, f, pod("b", nil), ctr("b", seal(b, testKey(b, 1), "lpu0")), true)
}

// BenchmarkRoundTrip is the full path a runtime pays: the adaptation's
// CreateContainer over the real unix socket to the plugin and back.
func BenchmarkRoundTrip(b *testing.B) {
	f := benchFixture(b)
	rt := nritest.New(b)
	rt.Start(b)
	f.connect(b, rt)
	rt.WaitPlugins(b, 1)
	p := pod("b", nil)
	ann := seal(b, f.key, "lpu6", "lpu7", "lpu0", "lpu1")
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuTime()
	for b.Loop() {
		rsp, err := rt.CreateContainer(ctx, p, ctr("b", ann))
		if err != nil || len(rsp.GetAdjust().GetLinux().GetDevices()) != 4 {
			b.Fatal(rsp, err)
		}
	}
	reportCPU(b, cpu) // both sides: the runtime and the plugin share the process
}

// BenchmarkValidate8 is the validator's check for a container of 8 LPUs:
// the pristine container carries /dev/null and friends, the merged
// adjustment the 8 nodes lpu-nri added.
func BenchmarkValidate8(b *testing.B) {
	f := benchFixture(b)
	ids := []string{"lpu0", "lpu1", "lpu2", "lpu3", "lpu4", "lpu5", "lpu6", "lpu7"}
	p, c := pod("b", nil), ctr("b", seal(b, f.key, ids...))
	c.Linux = &api.LinuxContainer{Devices: []*api.LinuxDevice{
		{Path: "/dev/null", Type: "c", Major: 1, Minor: 3}, {Path: "/dev/zero", Type: "c", Major: 1, Minor: 5},
		{Path: "/dev/random", Type: "c", Major: 1, Minor: 8}, {Path: "/dev/tty", Type: "c", Major: 5, Minor: 0},
	}}
	adj, _, err := f.p.CreateContainer(context.Background(), p, c)
	if err != nil {
		b.Fatal(err)
	}
	req := &api.ValidateContainerAdjustmentRequest{Pod: p, Container: c, Adjust: adj}
	b.ReportAllocs()
	cpu := cpuTime()
	for b.Loop() {
		if err := f.p.ValidateContainerAdjustment(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
	reportCPU(b, cpu)
}

package plugin

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"

	"github.com/hyperaccel/lpu-node/internal/nritest"
	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/inject"
)

func TestSynchronizeAudit(t *testing.T) {
	f := newFixture(t, 8, false)
	node := func(i int) *api.LinuxDevice {
		return &api.LinuxDevice{Path: fmt.Sprintf("/dev/lpu%d", i), Type: "c", Major: device.DefaultMajor, Minor: int64(i)}
	}
	rt := nritest.New(t)
	add := func(name string, podAnn, ann map[string]string, state api.ContainerState, devs ...*api.LinuxDevice) {
		rt.AddPod(pod(name, podAnn))
		c := ctr(name, ann)
		c.State = state
		c.Linux = &api.LinuxContainer{Devices: devs}
		rt.AddContainer(c)
	}
	running := api.ContainerState_CONTAINER_RUNNING
	add("ok", nil, seal(t, f.key, "lpu0", "lpu1"), running, node(0), node(1))
	add("no-lpu", nil, nil, running, &api.LinuxDevice{Path: "/dev/fuse", Type: "c", Major: 10, Minor: 229})
	add("unannotated", nil, nil, running, node(3))
	add("renamed-node", nil, nil, running, &api.LinuxDevice{Path: "/dev/accel", Type: "c", Major: device.DefaultMajor, Minor: 4})
	add("beyond-allocation", nil, seal(t, f.key, "lpu5"), running, node(5), node(6))
	add("forged", nil, map[string]string{inject.AnnotationDevices: "lpu7"}, running, node(7))
	add("pod-claims", seal(t, f.key, "lpu2"), seal(t, f.key, "lpu2"), running, node(2))
	add("stopped", nil, nil, api.ContainerState_CONTAINER_STOPPED, node(3))

	rt.Start(t)
	f.connect(t, rt)
	rt.WaitPlugins(t, 1)
	if got, want := counter(t, f.p.Metrics().Unallocated), 5.0; got != want {
		t.Fatalf("lpu_nri_unallocated_holders = %v, want %v", got, want)
	}
}

// TestPeriodicAudit: the audit runs between Synchronizes over the
// containers the runtime started, and counts both unallocated holders and
// containers running without their allocated LPUs.
func TestPeriodicAudit(t *testing.T) {
	f := newFixture(t, 8, false)
	rt := nritest.New(t)
	rt.Start(t)
	f.connect(t, rt)
	rt.WaitPlugins(t, 1)
	m := f.p.Metrics()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	// Started with its LPUs: fine.
	good := ctr("good", seal(t, f.key, "lpu0"))
	good.Linux = &api.LinuxContainer{Devices: []*api.LinuxDevice{lpuDev("/dev/lpu0", 0)}}
	// Allocated lpu2,lpu3 but holds only lpu2 (an injection lost).
	lost := ctr("lost", seal(t, f.key, "lpu2", "lpu3"))
	lost.Linux = &api.LinuxContainer{Devices: []*api.LinuxDevice{lpuDev("/dev/lpu2", 2)}}
	// Holds lpu7 without any allocation.
	thief := ctr("thief", nil)
	thief.Linux = &api.LinuxContainer{Devices: []*api.LinuxDevice{lpuDev("/dev/lpu7", 7)}}
	for _, c := range []*api.Container{good, lost, thief} {
		if err := rt.StartContainer(ctx, pod(strings.TrimPrefix(c.GetId(), "ctr-"), nil), c); err != nil {
			t.Fatal(err)
		}
	}
	errCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.p.RunAudit(errCtx, 20*time.Millisecond) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("RunAudit: %v", err)
		}
	}()
	eventually(t, "audit counts", func() bool {
		return counter(t, m.Uninjected) == 1 && counter(t, m.Unallocated) == 1
	})
	if counter(t, m.UninjectedFound) != 1 || counter(t, m.UnallocatedFound) != 1 {
		t.Errorf("found counters %v, %v; want 1, 1", counter(t, m.UninjectedFound), counter(t, m.UnallocatedFound))
	}
	time.Sleep(100 * time.Millisecond) // several more passes count nothing new
	if counter(t, m.UninjectedFound) != 1 || counter(t, m.UnallocatedFound) != 1 {
		t.Errorf("found counters moved on later passes: %v, %v", counter(t, m.UninjectedFound), counter(t, m.UnallocatedFound))
	}
	// Stopping them clears the gauges.
	for _, c := range []*api.Container{lost, thief} {
		if err := rt.StopContainer(ctx, pod(strings.TrimPrefix(c.GetId(), "ctr-"), nil), c); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "gauges back to 0", func() bool {
		return counter(t, m.Uninjected) == 0 && counter(t, m.Unallocated) == 0
	})
}

// eventually polls cond for up to 5s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 5s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

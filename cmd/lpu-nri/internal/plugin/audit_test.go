package plugin

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"

	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/inventory"
	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/verify"
	"github.com/hyperaccel/lpu-node/internal/nritest"
	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/device/devicesim"
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

// TestAuditByDeviceNumber: a held node is judged by the device it opens, not
// by the path it has in the container.
func TestAuditByDeviceNumber(t *testing.T) {
	f := newFixture(t, 8, false)
	dev := func(path string, minor int64) *api.LinuxDevice {
		return &api.LinuxDevice{Path: path, Type: "c", Major: device.DefaultMajor, Minor: minor}
	}
	tests := map[string]struct {
		ids     []string
		devs    []*api.LinuxDevice
		flagged bool
	}{
		"own node at its path":           {ids: []string{"lpu4"}, devs: []*api.LinuxDevice{dev("/dev/lpu4", 4)}},
		"own node at another path":       {ids: []string{"lpu4"}, devs: []*api.LinuxDevice{dev("/dev/accel0", 4)}},
		"own path, another LPU's number": {ids: []string{"lpu1"}, devs: []*api.LinuxDevice{dev("/dev/lpu1", 6)}, flagged: true},
		"two own nodes swapped":          {ids: []string{"lpu1", "lpu2"}, devs: []*api.LinuxDevice{dev("/dev/lpu1", 2), dev("/dev/lpu2", 1)}},
		"unknown number on our major":    {ids: []string{"lpu1"}, devs: []*api.LinuxDevice{dev("/dev/lpu1", 1), dev("/dev/x", 200)}, flagged: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c := ctr(name, seal(t, f.key, tc.ids...))
			c.State = api.ContainerState_CONTAINER_RUNNING
			c.Linux = &api.LinuxContainer{Devices: tc.devs}
			got := f.p.Audit([]*api.PodSandbox{pod(name, nil)}, []*api.Container{c})
			if want := map[bool]int{false: 0, true: 1}[tc.flagged]; got != want {
				t.Fatalf("Audit = %d holders, want %d", got, want)
			}
		})
	}
}

// TestAuditOrion: on an Orion node (xilinx backend) every LPU has two
// nodes; the audit knows both by number, and a GPU's render node on DRM's
// shared major is not an LPU's.
func TestAuditOrion(t *testing.T) {
	root := t.TempDir()
	if err := devicesim.Write(root, devicesim.Spec{Devices: 4, Rings: 1, Backend: device.BackendXilinx}); err != nil {
		t.Fatal(err)
	}
	store := inventory.New(device.NewSysfs(root, device.WithLogger(discard),
		device.WithDiscovery(device.Discovery{Backend: device.BackendXilinx})), inventory.Options{Logger: discard})
	if _, err := store.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	key := testKey(t, 7)
	p, err := New(Config{Config: verify.Config{Key: key, Store: store, Log: discard}})
	if err != nil {
		t.Fatal(err)
	}
	render := func(i int64) *api.LinuxDevice {
		return &api.LinuxDevice{Path: fmt.Sprintf("/dev/dri/renderD%d", 128+i), Type: "c", Major: devicesim.RenderMajor, Minor: 128 + i}
	}
	mgmt := func(i int64) *api.LinuxDevice {
		return &api.LinuxDevice{Path: "/dev/xclmgmt", Type: "c", Major: devicesim.XclmgmtMajor, Minor: i}
	}
	tests := map[string]struct {
		ids        []string
		devs       []*api.LinuxDevice
		flagged    bool
		uninjected bool
	}{
		"both nodes of its LPU":              {ids: []string{"lpu1"}, devs: []*api.LinuxDevice{render(1), mgmt(1)}},
		"only the render node of its LPU":    {ids: []string{"lpu1"}, devs: []*api.LinuxDevice{render(1)}, uninjected: true},
		"another LPU's management node":      {ids: []string{"lpu1"}, devs: []*api.LinuxDevice{render(1), mgmt(2)}, flagged: true},
		"no allocation, a management node":   {devs: []*api.LinuxDevice{mgmt(3)}, flagged: true},
		"no allocation, a GPU's render node": {devs: []*api.LinuxDevice{render(20)}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var ann map[string]string
			if tc.ids != nil {
				ann = seal(t, key, tc.ids...)
			}
			c := ctr(name, ann)
			c.State = api.ContainerState_CONTAINER_RUNNING
			c.Linux = &api.LinuxContainer{Devices: tc.devs}
			holders, uninjected := p.AuditCounts([]*api.PodSandbox{pod(name, nil)}, []*api.Container{c})
			if want := map[bool]int{false: 0, true: 1}[tc.flagged]; holders != want {
				t.Fatalf("AuditCounts = %d holders, want %d", holders, want)
			}
			if want := map[bool]int{false: 0, true: 1}[tc.uninjected]; uninjected != want {
				t.Fatalf("AuditCounts = %d uninjected, want %d", uninjected, want)
			}
		})
	}

	// The validator grants every node of an allocated LPU: lpu-nri's own
	// adjustment (render and management node) passes, one more LPU's
	// management node is refused.
	pd, c := pod("v", nil), ctr("v", seal(t, key, "lpu1"))
	adj, _, err := p.verifier.Decide(context.Background(), pd, c)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(adj.GetLinux().GetDevices()); n != 2 {
		t.Fatalf("adjustment has %d devices, want render and management node", n)
	}
	if err := p.verifier.Validate(pd, c, adj); err != nil {
		t.Fatalf("lpu-nri's own Orion adjustment refused: %v", err)
	}
	extra := &api.ContainerAdjustment{Linux: &api.LinuxContainerAdjustment{
		Devices: append(slices.Clone(adj.GetLinux().GetDevices()), &api.LinuxDevice{Path: "/dev/xclmgmt2", Type: "c", Major: devicesim.XclmgmtMajor, Minor: 2})}}
	if err := p.verifier.Validate(pd, c, extra); err == nil {
		t.Fatal("validated another LPU's management node")
	}
}

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

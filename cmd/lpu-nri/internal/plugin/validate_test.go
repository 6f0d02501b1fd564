package plugin

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"

	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/ledger"
	"github.com/hyperaccel/lpu-node/internal/nritest"
)

// slowCheck is a PodResources cross-check that hangs past the runtime's
// plugin timeout, whatever its context says (a kubelet that stopped
// answering on a socket that still accepts).
type slowCheck struct{ d time.Duration }

func (s slowCheck) Check(context.Context, string, string, string, []string) error {
	time.Sleep(s.d)
	return nil
}

// TestSlowCreateContainerFailsClosed reproduces the bypass: lpu-nri's
// CreateContainer outlives the runtime's plugin timeout, NRI closes the
// plugin and, without a validator, creates the container without its
// LPUs. As a validator, lpu-nri makes the creation fail instead.
func TestSlowCreateContainerFailsClosed(t *testing.T) {
	nritest.SetRequestTimeout(t, 300*time.Millisecond)
	f := newFixture(t, 8, false, func(c *Config) { c.Check = slowCheck{time.Second} })
	rt := nritest.New(t)
	rt.Start(t)
	f.connect(t, rt)
	rt.WaitPlugins(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rsp, err := rt.CreateContainer(ctx, pod("slow", nil), ctr("slow", seal(t, f.key, "lpu2", "lpu3")))
	if err == nil {
		t.Fatalf("container created without lpu-nri's adjustment (devices %v): the slow plugin was bypassed", viewOf(rsp.GetAdjust()).Devices)
	}
	t.Logf("creation failed as it must: %v", err)
}

// other is a second NRI plugin whose CreateContainer returns adj.
type other struct {
	adj func() *api.ContainerAdjustment
}

func (o *other) CreateContainer(context.Context, *api.PodSandbox, *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	return o.adj(), nil, nil
}

// runOther connects another plugin at index 20 until the test ends.
func runOther(t *testing.T, rt *nritest.Runtime, o *other) {
	t.Helper()
	s, err := stub.New(o, stub.WithPluginName("other"), stub.WithPluginIdx("20"), stub.WithSocketPath(rt.Socket))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = s.Run(ctx); close(done) }()
	t.Cleanup(func() {
		cancel()
		s.Stop()
		<-done
	})
}

// TestValidator: with another plugin or the pristine container adding LPU
// nodes, the container's final LPU nodes (by number) must equal its
// allocation, or creation fails naming the difference.
func TestValidator(t *testing.T) {
	f := newFixture(t, 8, false, func(c *Config) { c.AllowNamespaces = []string{"node-agents"} })
	rt := nritest.New(t)
	rt.Start(t)
	f.connect(t, rt)
	var adj func() *api.ContainerAdjustment
	runOther(t, rt, &other{adj: func() *api.ContainerAdjustment { return adj() }})
	rt.WaitPlugins(t, 2)

	none := func() *api.ContainerAdjustment { return &api.ContainerAdjustment{} }
	tests := map[string]struct {
		other     func() *api.ContainerAdjustment
		ns        string
		ann       map[string]string
		pristine  []*api.LinuxDevice
		privilege bool
		errHas    string // "" accepted
	}{
		"allocated, nothing else":   {other: none, ann: seal(t, f.key, "lpu2", "lpu3")},
		"unallocated, nothing else": {other: none},
		"other plugin adds an LPU under another path": {
			other: func() *api.ContainerAdjustment {
				a := &api.ContainerAdjustment{}
				a.AddDevice(lpuDev("/dev/accel0", 5))
				return a
			},
			ann:    seal(t, f.key, "lpu2"),
			errHas: "not allocated /dev/accel0 (509:5, lpu5)",
		},
		"other plugin adds an LPU to an unallocated container": {
			other: func() *api.ContainerAdjustment {
				a := &api.ContainerAdjustment{}
				a.AddDevice(lpuDev("/dev/lpu1", 1))
				return a
			},
			errHas: "differ from its allocation (none): not allocated /dev/lpu1",
		},
		"other plugin adds an LPU CDI device": {
			other: func() *api.ContainerAdjustment {
				return &api.ContainerAdjustment{CDIDevices: []*api.CDIDevice{{Name: "hyperaccel.ai/lpu=lpu4"}}}
			},
			errHas: `CDI device "hyperaccel.ai/lpu=lpu4" injected by a plugin`,
		},
		"privileged container carries every LPU": {
			other:     none,
			pristine:  []*api.LinuxDevice{lpuDev("/dev/lpu0", 0), lpuDev("/dev/lpu1", 1), {Path: "/dev/null", Type: "c", Major: 1, Minor: 3}},
			privilege: true,
			errHas:    "privileged container carries LPU device nodes it was not allocated (/dev/lpu0 (509:0, lpu0), /dev/lpu1 (509:1, lpu1))",
		},
		"privileged node agent in an allowlisted namespace": {
			other: none, ns: "node-agents",
			pristine:  []*api.LinuxDevice{lpuDev("/dev/lpu0", 0), lpuDev("/dev/lpu1", 1)},
			privilege: true,
		},
		"container carrying an LPU node it was not allocated": {
			other:    none,
			ann:      seal(t, f.key, "lpu1"),
			pristine: []*api.LinuxDevice{lpuDev("/dev/lpu6", 6), lpuDev("/dev/accel1", 1)},
			errHas:   "container carries LPU device nodes it was not allocated (/dev/lpu6 (509:6, lpu6))",
		},
		"container carrying its allocated LPU under another path": {
			other:    none,
			ann:      seal(t, f.key, "lpu1"),
			pristine: []*api.LinuxDevice{lpuDev("/dev/accel1", 1)},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			adj = tc.other
			p := pod("v", nil)
			if tc.ns != "" {
				p.Namespace = tc.ns
			}
			c := ctr("v", tc.ann)
			c.Linux = &api.LinuxContainer{Devices: tc.pristine}
			if tc.privilege {
				c.Linux.Resources = &api.LinuxResources{Devices: []*api.LinuxDeviceCgroup{{Allow: true, Access: "rwm"}}}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			rsp, err := rt.CreateContainer(ctx, p, c)
			if tc.errHas == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.errHas) {
				t.Fatalf("CreateContainer = %v, %v; want error containing %q", viewOf(rsp.GetAdjust()), err, tc.errHas)
			}
		})
	}
}

func TestHasValidators(t *testing.T) {
	tests := map[string]struct {
		runtime, version string
		want             bool
	}{
		"containerd 1.7":    {"containerd", "v1.7.27", false},
		"containerd 2.1":    {"containerd", "v2.1.4", false},
		"containerd 2.2":    {"containerd", "v2.2.0", true},
		"containerd 2.4.2":  {"containerd", "2.4.2", true},
		"containerd rc":     {"containerd", "v2.2.0-rc.1", true},
		"containerd 3":      {"containerd", "v3.0.0", true},
		"containerd garble": {"containerd", "dev", false},
		"cri-o 1.33":        {"cri-o", "1.33.2", false},
		"cri-o 1.34":        {"cri-o", "1.34.0", true},
		"other runtime":     {"nritest", "v0.0.1", true},
	}
	for name, tc := range tests {
		if got := HasValidators(tc.runtime, tc.version); got != tc.want {
			t.Errorf("%s: HasValidators(%q, %q) = %v, want %v", name, tc.runtime, tc.version, got, tc.want)
		}
	}
}

// TestSynchronizeSeedsLedger: allocations of containers already running
// when lpu-nri connects (the ledger file lost, or a new lpu-nri) belong to
// their pods from then on.
func TestSynchronizeSeedsLedger(t *testing.T) {
	f := newFixture(t, 8, false)
	ann := seal(t, f.key, "lpu3")
	victim := pod("victim", nil)
	running := ctr("victim", ann)
	running.State = api.ContainerState_CONTAINER_RUNNING
	running.Linux = &api.LinuxContainer{Devices: []*api.LinuxDevice{lpuDev("/dev/lpu3", 3)}}
	rt := nritest.New(t)
	rt.AddPod(victim)
	rt.AddContainer(running)
	rt.Start(t)
	f.connect(t, rt)
	rt.WaitPlugins(t, 1)
	if _, _, err := f.p.CreateContainer(context.Background(), pod("thief", nil), ctr("thief", ann)); !errors.Is(err, ledger.ErrOtherPod) {
		t.Fatalf("a running pod's allocation in another pod: %v, want refused", err)
	}
	if _, _, err := f.p.CreateContainer(context.Background(), victim, ctr("victim", ann)); err != nil {
		t.Fatalf("the running pod's own restart: %v", err)
	}
}

package plugin

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"

	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/verify"
	"github.com/hyperaccel/lpu-node/internal/nritest"
	"github.com/hyperaccel/lpu-node/pkg/device"
)

// cgroupRule is an OCI device cgroup rule; major or minor < 0 is a wildcard.
func cgroupRule(allow bool, typ string, major, minor int64, access string) *api.LinuxDeviceCgroup {
	r := &api.LinuxDeviceCgroup{Allow: allow, Type: typ, Access: access}
	if major >= 0 {
		r.Major = api.Int64(major)
	}
	if minor >= 0 {
		r.Minor = api.Int64(minor)
	}
	return r
}

// containerdRules are the rules containerd gives an unprivileged container:
// deny everything, then the default devices and /dev/pts.
func containerdRules(extra ...*api.LinuxDeviceCgroup) []*api.LinuxDeviceCgroup {
	rules := []*api.LinuxDeviceCgroup{
		cgroupRule(false, "", -1, -1, "rwm"),
		cgroupRule(true, "c", 1, 3, "rwm"), cgroupRule(true, "c", 1, 5, "rwm"),
		cgroupRule(true, "c", 1, 8, "rwm"), cgroupRule(true, "c", 1, 9, "rwm"),
		cgroupRule(true, "c", 5, 0, "rwm"), cgroupRule(true, "c", 5, 1, "rwm"),
		cgroupRule(true, "c", 136, -1, "rwm"), cgroupRule(true, "c", 10, 200, "rwm"),
	}
	return append(rules, extra...)
}

const lpuMajor = device.DefaultMajor

// TestUnbufferedCharNodes: an LPU node of OCI type "u" (runc creates an
// unbuffered char device as a char node) counts as one everywhere lpu-nri
// looks at nodes: the carried-node check, the validator and the audit.
func TestUnbufferedCharNodes(t *testing.T) {
	f := newFixture(t, 8, false)
	uNode := &api.LinuxDevice{Path: "/dev/accel0", Type: "u", Major: lpuMajor, Minor: 6}

	t.Run("carried", func(t *testing.T) {
		c := ctr("u", seal(t, f.key, "lpu1"))
		c.Linux = &api.LinuxContainer{Devices: []*api.LinuxDevice{uNode}}
		_, _, err := f.p.verifier.Decide(context.Background(), pod("u", nil), c)
		if err == nil || !strings.Contains(err.Error(), "carries LPU device nodes it was not allocated (/dev/accel0 (509:6, lpu6))") {
			t.Fatalf("Decide = %v, want unallocated-nodes", err)
		}
		c = ctr("u-none", nil)
		c.Linux = &api.LinuxContainer{Devices: []*api.LinuxDevice{uNode}}
		if _, _, err := f.p.verifier.Decide(context.Background(), pod("u-none", nil), c); err == nil {
			t.Fatal("unallocated container carrying a u node accepted")
		}
	})
	t.Run("validator", func(t *testing.T) {
		adj := &api.ContainerAdjustment{}
		adj.AddDevice(uNode)
		err := f.p.verifier.Validate(pod("u", nil), ctr("u", seal(t, f.key, "lpu1")), adj)
		if err == nil || !strings.Contains(err.Error(), "not allocated /dev/accel0 (509:6, lpu6)") {
			t.Fatalf("Validate = %v, want device-mismatch", err)
		}
		// Its own LPU added as a u node counts as injected.
		own := &api.ContainerAdjustment{}
		own.AddDevice(&api.LinuxDevice{Path: "/dev/lpu1", Type: "u", Major: lpuMajor, Minor: 1})
		if err := f.p.verifier.Validate(pod("u", nil), ctr("u", seal(t, f.key, "lpu1")), own); err != nil {
			t.Fatalf("own LPU as a u node: %v", err)
		}
	})
	t.Run("audit", func(t *testing.T) {
		c := ctr("u-audit", nil)
		c.State = api.ContainerState_CONTAINER_RUNNING
		c.Linux = &api.LinuxContainer{Devices: []*api.LinuxDevice{uNode}}
		if got := f.p.Audit([]*api.PodSandbox{pod("u-audit", nil)}, []*api.Container{c}); got != 1 {
			t.Fatalf("Audit = %d holders, want 1", got)
		}
	})
}

// TestDeviceCgroupRules: a container whose device cgroup admits an LPU it
// was not allocated is refused although it carries no node (with
// CAP_MKNOD it can make one), through the real NRI adaptation: by
// CreateContainer and by the validator, outside security.allowNamespaces.
func TestDeviceCgroupRules(t *testing.T) {
	f := newFixture(t, 8, false, func(c *Config) { c.AllowNamespaces = []string{"node-agents"} })
	rt := nritest.New(t)
	rt.Start(t)
	f.connect(t, rt)
	var adj func() *api.ContainerAdjustment
	runOther(t, rt, &other{adj: func() *api.ContainerAdjustment { return adj() }})
	rt.WaitPlugins(t, 2)
	none := func() *api.ContainerAdjustment { return &api.ContainerAdjustment{} }
	allowAll := []*api.LinuxDeviceCgroup{cgroupRule(true, "a", -1, -1, "rwm")}

	tests := map[string]struct {
		ns     string
		ann    []string // allocated IDs
		rules  []*api.LinuxDeviceCgroup
		other  func() *api.ContainerAdjustment
		errHas string // "" accepted
	}{
		"containerd's default rules": {rules: containerdRules()},
		"only its own LPUs allowed": {
			ann:   []string{"lpu2", "lpu3"},
			rules: containerdRules(cgroupRule(true, "c", lpuMajor, 2, "rw"), cgroupRule(true, "c", lpuMajor, 3, "rw")),
		},
		"wildcard minor on the LPU major, no node": {
			rules:  containerdRules(cgroupRule(true, "c", lpuMajor, -1, "rwm")),
			errHas: "device cgroup admits LPUs it was not allocated (allocation none): 509:0 (lpu0) rwm, 509:1 (lpu1) rwm",
		},
		"wildcard minor, allocated lpu2": {
			ann:    []string{"lpu2"},
			rules:  containerdRules(cgroupRule(true, "c", lpuMajor, -1, "rw")),
			errHas: "device cgroup admits LPUs it was not allocated (allocation lpu2)",
		},
		"another LPU's number": {
			ann:    []string{"lpu2"},
			rules:  containerdRules(cgroupRule(true, "c", lpuMajor, 5, "r")),
			errHas: "509:5 (lpu5) r",
		},
		"mknod only still admits": {
			rules:  containerdRules(cgroupRule(true, "c", -1, -1, "m")),
			errHas: "device cgroup admits LPUs",
		},
		"allow-all (privileged_without_host_devices_all_devices_allowed)": {
			rules:  allowAll,
			errHas: "509:7 (lpu7) rwm, other minors of major 509, the LPU driver's (509:8 rwm)",
		},
		"allow-all after containerd's deny-all": {
			ann:    []string{"lpu1"},
			rules:  containerdRules(cgroupRule(true, "", -1, -1, "rwm")),
			errHas: "device cgroup admits LPUs",
		},
		"allow-all in an allowlisted namespace": {ns: "node-agents", rules: allowAll},
		"allow-all then the LPU major denied": {
			rules: append(allowAll[:1:1], cgroupRule(false, "c", lpuMajor, -1, "rwm")),
		},
		"wildcard allow then deny-all last": {
			rules: []*api.LinuxDeviceCgroup{cgroupRule(true, "c", lpuMajor, -1, "rwm"), cgroupRule(false, "a", -1, -1, "rwm")},
		},
		"another plugin adds an allow rule": {
			rules: containerdRules(),
			other: func() *api.ContainerAdjustment {
				return &api.ContainerAdjustment{Linux: &api.LinuxContainerAdjustment{Resources: &api.LinuxResources{
					Devices: []*api.LinuxDeviceCgroup{cgroupRule(true, "c", lpuMajor, 4, "rw")}}}}
			},
			errHas: "509:4 (lpu4) rw",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			adj = none
			if tc.other != nil {
				adj = tc.other
			}
			p := pod("cg", nil)
			if tc.ns != "" {
				p.Namespace = tc.ns
			}
			var ann map[string]string
			if len(tc.ann) > 0 {
				ann = seal(t, f.key, tc.ann...)
			}
			c := ctr("cg", ann)
			c.Linux = &api.LinuxContainer{Resources: &api.LinuxResources{Devices: tc.rules}}
			m := f.p.Metrics()
			before := counter(t, m.Refusals.WithLabelValues(verify.ReasonDeviceCgroup))
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
			if got := counter(t, m.Refusals.WithLabelValues(verify.ReasonDeviceCgroup)); got != before+1 {
				t.Fatalf("refusals{reason=device-cgroup} = %v, want %v", got, before+1)
			}
		})
	}
}

// TestDeviceCgroupEachGuard: each guard refuses on its own, for runtimes
// without validators (CreateContainer alone) and for a CreateContainer the
// runtime lost (the validator alone), and the audit counts a running
// container whose rules admit LPUs as an unallocated holder.
func TestDeviceCgroupEachGuard(t *testing.T) {
	f := newFixture(t, 8, false)
	wild := containerdRules(cgroupRule(true, "c", lpuMajor, -1, "rw"))
	c := ctr("g", nil)
	c.Linux = &api.LinuxContainer{Resources: &api.LinuxResources{Devices: wild}}
	if _, _, err := f.p.verifier.Decide(context.Background(), pod("g", nil), c); err == nil || !strings.Contains(err.Error(), "device cgroup admits LPUs") {
		t.Errorf("Decide = %v, want device-cgroup refusal", err)
	}
	if err := f.p.verifier.Validate(pod("g", nil), c, &api.ContainerAdjustment{}); err == nil || !strings.Contains(err.Error(), "device cgroup admits LPUs") {
		t.Errorf("Validate = %v, want device-cgroup refusal", err)
	}
	// The validator sees the allow rule the runtime adds for each device a
	// plugin injects: a non-LPU node under an LPU number is still an LPU.
	clean := ctr("g2", nil)
	clean.Linux = &api.LinuxContainer{Resources: &api.LinuxResources{Devices: containerdRules()}}
	if err := f.p.verifier.Validate(pod("g2", nil), clean, &api.ContainerAdjustment{}); err != nil {
		t.Errorf("Validate(default rules) = %v", err)
	}
	claims := ctr("g3", nil)
	claims.CDIDevices = []*api.CDIDevice{{Name: "lpu.hyperaccel.ai/claim=c1"}}
	claims.Linux = &api.LinuxContainer{Resources: &api.LinuxResources{Devices: wild}}
	fc := newFixture(t, 8, false, func(c *Config) {
		c.Claims = func(string, []string) ([]string, error) { return []string{"lpu1"}, nil }
	})
	if _, _, err := fc.p.verifier.Decide(context.Background(), pod("g3", nil), claims); err == nil || !strings.Contains(err.Error(), "device cgroup admits LPUs") {
		t.Errorf("Decide(claims) = %v, want device-cgroup refusal", err)
	}

	running := func(name string, ann map[string]string, rules []*api.LinuxDeviceCgroup, devs ...*api.LinuxDevice) *api.Container {
		c := ctr(name, ann)
		c.State = api.ContainerState_CONTAINER_RUNNING
		c.Linux = &api.LinuxContainer{Devices: devs, Resources: &api.LinuxResources{Devices: rules}}
		return c
	}
	own := seal(t, f.key, "lpu2")
	tests := map[string]struct {
		c       *api.Container
		flagged bool
	}{
		"wildcard rule, no node": {c: running("a1", nil, wild), flagged: true},
		"allow-all, no node":     {c: running("a2", nil, []*api.LinuxDeviceCgroup{cgroupRule(true, "a", -1, -1, "rwm")}), flagged: true},
		"own LPU allowed": {c: running("a3", own, containerdRules(cgroupRule(true, "c", lpuMajor, 2, "rw")),
			lpuDev("/dev/lpu2", 2))},
		"own LPU and another allowed": {c: running("a4", own, containerdRules(cgroupRule(true, "c", lpuMajor, 2, "rw"), cgroupRule(true, "c", lpuMajor, 3, "rw")),
			lpuDev("/dev/lpu2", 2)), flagged: true},
		"default rules": {c: running("a5", nil, containerdRules())},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := f.p.Audit([]*api.PodSandbox{pod(strings.TrimPrefix(tc.c.GetId(), "ctr-"), nil)}, []*api.Container{tc.c})
			if want := map[bool]int{false: 0, true: 1}[tc.flagged]; got != want {
				t.Fatalf("Audit = %d holders, want %d", got, want)
			}
		})
	}
}

// BenchmarkCreateContainerValid4Rules is BenchmarkCreateContainerValid4
// with the device cgroup rules containerd writes (deny-all, the standard
// devices): the cost of the rule check on the common path.
func BenchmarkCreateContainerValid4Rules(b *testing.B) {
	f := benchFixture(b)
	c := ctr("b", seal(b, f.key, "lpu6", "lpu7", "lpu0", "lpu1"), "PATH=/bin")
	c.Linux = &api.LinuxContainer{Resources: &api.LinuxResources{Devices: containerdRules()}}
	benchCreate(b, f, pod("b", map[string]string{"app": "x"}), c, false)
}

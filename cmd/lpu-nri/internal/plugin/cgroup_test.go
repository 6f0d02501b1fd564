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

const lpuMajor = device.DefaultMajor

// TestDeviceCgroupRules: a container whose device cgroup admits an LPU it
// was not allocated is refused although it carries no node (with
// CAP_MKNOD it can make one), through the real NRI adaptation: by
// CreateContainer and by the validator, outside security.allowNamespaces
// (the rule's cases: verify's TestNoOtherLPU).
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
		"containerd's default rules":            {rules: containerdRules()},
		"allow-all in an allowlisted namespace": {ns: "node-agents", rules: allowAll},
		"wildcard minor on the LPU major, no node": {
			rules:  containerdRules(cgroupRule(true, "c", lpuMajor, -1, "rwm")),
			errHas: "device cgroup admits LPUs it was not allocated (allocation none): 509:0 (lpu0) rwm, 509:1 (lpu1) rwm",
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

// BenchmarkCreateContainerValid4Rules is BenchmarkCreateContainerValid4
// with the device cgroup rules containerd writes (deny-all, the standard
// devices): the cost of the rule check on the common path.
func BenchmarkCreateContainerValid4Rules(b *testing.B) {
	f := benchFixture(b)
	c := ctr("b", seal(b, f.key, "lpu6", "lpu7", "lpu0", "lpu1"), "PATH=/bin")
	c.Linux = &api.LinuxContainer{Resources: &api.LinuxResources{Devices: containerdRules()}}
	benchCreate(b, f, pod("b", map[string]string{"app": "x"}), c, false)
}

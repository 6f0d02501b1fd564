package verify_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/containerd/nri/pkg/api"

	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/inventory"
	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/verify"
	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/verify/verifytest"
	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/device/devicesim"
)

// TestValidateWithoutInventory: before discovery succeeds, containers
// without an allocation pass the validator (the node keeps running its
// agents); one with an allocation is refused.
func TestValidateWithoutInventory(t *testing.T) {
	empty := inventory.New(device.NewSysfs(t.TempDir(), device.WithLogger(verifytest.Discard)), inventory.Options{Logger: verifytest.Discard})
	nd, v := newVerifier(t, 8, false, func(c *verify.Config) { c.Store = empty })
	if err := v.Validate(pod("a", nil), ctr("a", nil), &api.ContainerAdjustment{}); err != nil {
		t.Errorf("unallocated container refused without inventory: %v", err)
	}
	err := v.Validate(pod("b", nil), ctr("b", seal(t, nd.Key, "lpu0")), &api.ContainerAdjustment{})
	wantRefusal(t, err, verify.ErrKnownHealthy, verify.ReasonNoInventory, "cannot validate the container's devices")
}

// TestUnbufferedCharNodes: an LPU node of OCI type "u" (runc creates an
// unbuffered char device as a char node) counts as one for the validator
// and the audit too (TestNoOtherLPU: the carried-node check).
func TestUnbufferedCharNodes(t *testing.T) {
	nd, v := newVerifier(t, 8, false)
	uNode := &api.LinuxDevice{Path: "/dev/accel0", Type: "u", Major: lpuMajor, Minor: 6}
	adj := &api.ContainerAdjustment{}
	adj.AddDevice(uNode)
	err := v.Validate(pod("u", nil), ctr("u", seal(t, nd.Key, "lpu1")), adj)
	wantRefusal(t, err, verify.ErrFinalDevices, verify.ReasonMismatch, "not allocated /dev/accel0 (509:6, lpu6)")
	// Its own LPU added as a u node counts as injected.
	own := &api.ContainerAdjustment{}
	own.AddDevice(&api.LinuxDevice{Path: "/dev/lpu1", Type: "u", Major: lpuMajor, Minor: 1})
	if err := v.Validate(pod("u", nil), ctr("u", seal(t, nd.Key, "lpu1")), own); err != nil {
		t.Fatalf("own LPU as a u node: %v", err)
	}
	c := ctr("u-audit", nil)
	c.Linux = &api.LinuxContainer{Devices: []*api.LinuxDevice{uNode}}
	if f := audit(nd, v, pod("u-audit", nil), c); f.Unallocated == "" {
		t.Fatalf("Audit = %+v, want an unallocated holder", f)
	}
}

// TestDeviceCgroupEachGuard: device cgroup rules admitting an LPU refuse
// the container in the validator on its own (a CreateContainer the
// runtime lost; TestNoOtherLPU: CreateContainer alone), and the audit
// counts a running container whose rules admit LPUs as an unallocated
// holder.
func TestDeviceCgroupEachGuard(t *testing.T) {
	nd, v := newVerifier(t, 8, false)
	wild := ctrRules(rule(true, "c", lpuMajor, -1, "rw"))
	c := ctr("g", nil)
	c.Linux = &api.LinuxContainer{Resources: &api.LinuxResources{Devices: wild}}
	err := v.Validate(pod("g", nil), c, &api.ContainerAdjustment{})
	wantRefusal(t, err, verify.ErrNoOtherLPU, verify.ReasonDeviceCgroup, "device cgroup admits LPUs")
	// The validator sees the allow rule the runtime adds for each device a
	// plugin injects: a non-LPU node under an LPU number is still an LPU.
	clean := ctr("g2", nil)
	clean.Linux = &api.LinuxContainer{Resources: &api.LinuxResources{Devices: ctrRules()}}
	if err := v.Validate(pod("g2", nil), clean, &api.ContainerAdjustment{}); err != nil {
		t.Errorf("Validate(default rules) = %v", err)
	}

	running := func(name string, ann map[string]string, rules []*api.LinuxDeviceCgroup, devs ...*api.LinuxDevice) *api.Container {
		c := ctr(name, ann)
		c.Linux = &api.LinuxContainer{Devices: devs, Resources: &api.LinuxResources{Devices: rules}}
		return c
	}
	own := seal(t, nd.Key, "lpu2")
	tests := map[string]struct {
		c       *api.Container
		flagged bool
	}{
		"wildcard rule, no node": {c: running("a1", nil, wild), flagged: true},
		"allow-all, no node":     {c: running("a2", nil, []*api.LinuxDeviceCgroup{rule(true, "a", -1, -1, "rwm")}), flagged: true},
		"own LPU allowed": {c: running("a3", own, ctrRules(rule(true, "c", lpuMajor, 2, "rw")),
			lpuDev("/dev/lpu2", 2))},
		"own LPU and another allowed": {c: running("a4", own, ctrRules(rule(true, "c", lpuMajor, 2, "rw"), rule(true, "c", lpuMajor, 3, "rw")),
			lpuDev("/dev/lpu2", 2)), flagged: true},
		"default rules": {c: running("a5", nil, ctrRules())},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if f := audit(nd, v, pod(tc.c.GetName(), nil), tc.c); (f.Unallocated != "") != tc.flagged {
				t.Fatalf("Audit = %+v, want flagged %v", f, tc.flagged)
			}
		})
	}
}

// TestAuditByDeviceNumber: a held node is judged by the device it opens, not
// by the path it has in the container.
func TestAuditByDeviceNumber(t *testing.T) {
	nd, v := newVerifier(t, 8, false)
	tests := map[string]struct {
		ids     []string
		devs    []*api.LinuxDevice
		flagged bool
	}{
		"own node at its path":           {ids: []string{"lpu4"}, devs: []*api.LinuxDevice{lpuDev("/dev/lpu4", 4)}},
		"own node at another path":       {ids: []string{"lpu4"}, devs: []*api.LinuxDevice{lpuDev("/dev/accel0", 4)}},
		"own path, another LPU's number": {ids: []string{"lpu1"}, devs: []*api.LinuxDevice{lpuDev("/dev/lpu1", 6)}, flagged: true},
		"two own nodes swapped":          {ids: []string{"lpu1", "lpu2"}, devs: []*api.LinuxDevice{lpuDev("/dev/lpu1", 2), lpuDev("/dev/lpu2", 1)}},
		"unknown number on our major":    {ids: []string{"lpu1"}, devs: []*api.LinuxDevice{lpuDev("/dev/lpu1", 1), lpuDev("/dev/x", 200)}, flagged: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c := ctr(name, seal(t, nd.Key, tc.ids...))
			c.Linux = &api.LinuxContainer{Devices: tc.devs}
			if f := audit(nd, v, pod(name, nil), c); (f.Unallocated != "") != tc.flagged {
				t.Fatalf("Audit = %+v, want flagged %v", f, tc.flagged)
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
	store := inventory.New(device.NewSysfs(root, device.WithLogger(verifytest.Discard),
		device.WithDiscovery(device.Discovery{Backend: device.BackendXilinx})), inventory.Options{Logger: verifytest.Discard})
	if _, err := store.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	nd, v := newVerifier(t, 8, false, func(c *verify.Config) { c.Store = store })
	nd.Store = store
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
				ann = seal(t, nd.Key, tc.ids...)
			}
			c := ctr(name, ann)
			c.Linux = &api.LinuxContainer{Devices: tc.devs}
			f := audit(nd, v, pod(name, nil), c)
			if (f.Unallocated != "") != tc.flagged || (f.Unallocated == "" && (f.Uninjected != "") != tc.uninjected) {
				t.Fatalf("Audit = %+v, want flagged %v, uninjected %v", f, tc.flagged, tc.uninjected)
			}
		})
	}

	// The validator grants every node of an allocated LPU: lpu-nri's own
	// adjustment (render and management node) passes, one more LPU's
	// management node is refused.
	pd, c := pod("v", nil), ctr("v", seal(t, nd.Key, "lpu1"))
	adj, _, err := v.Decide(context.Background(), pd, c)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(adj.GetLinux().GetDevices()); n != 2 {
		t.Fatalf("adjustment has %d devices, want render and management node", n)
	}
	if err := v.Validate(pd, c, adj); err != nil {
		t.Fatalf("lpu-nri's own Orion adjustment refused: %v", err)
	}
	extra := &api.ContainerAdjustment{Linux: &api.LinuxContainerAdjustment{
		Devices: append(slices.Clone(adj.GetLinux().GetDevices()), &api.LinuxDevice{Path: "/dev/xclmgmt2", Type: "c", Major: devicesim.XclmgmtMajor, Minor: 2})}}
	wantRefusal(t, v.Validate(pd, c, extra), verify.ErrFinalDevices, verify.ReasonMismatch, "not allocated /dev/xclmgmt2")
}

// validatorRules are the refusals of Validate's checks; a refusal is its
// check's and no other's, except that ErrPluginCDIDevice is also
// ErrFinalDevices.
var validatorRules = []error{verify.ErrKnownHealthy, verify.ErrPluginCDIDevice, verify.ErrFinalDevices, verify.ErrNoOtherLPU}

// TestValidatorChecks drives each of Validate's checks (package doc,
// Validator and audit) to its refusal, tells them apart with errors.Is,
// and pins their order: where two checks would refuse, the earlier one
// does.
func TestValidatorChecks(t *testing.T) {
	nd, v := newVerifier(t, 8, false, withClaims(t))
	adjust := func(cdi []string, devs []*api.LinuxDevice, rules ...*api.LinuxDeviceCgroup) *api.ContainerAdjustment {
		adj := &api.ContainerAdjustment{Linux: &api.LinuxContainerAdjustment{Devices: devs,
			Resources: &api.LinuxResources{Devices: rules}}}
		for _, n := range cdi {
			adj.CDIDevices = append(adj.CDIDevices, &api.CDIDevice{Name: n})
		}
		return adj
	}
	own := []*api.LinuxDevice{lpuDev("/dev/lpu1", 1)}
	tests := map[string]struct {
		ctr         *api.Container
		adj         *api.ContainerAdjustment
		rule        error // nil: admitted
		reason, has string
	}{
		"its own nodes": {ctr: ctr("c", seal(t, nd.Key, "lpu1")), adj: adjust(nil, own)},
		"a plugin's LPU CDI device": {ctr: ctr("c", seal(t, nd.Key, "lpu1")), adj: adjust([]string{"hyperaccel.ai/lpu=lpu4"}, own),
			rule: verify.ErrPluginCDIDevice, reason: verify.ReasonMismatch, has: `CDI device "hyperaccel.ai/lpu=lpu4" injected by a plugin`},
		"a plugin's claim CDI device": {ctr: ctr("c", nil), adj: adjust([]string{"lpu.hyperaccel.ai/claim=c2"}, nil),
			rule: verify.ErrPluginCDIDevice, reason: verify.ReasonMismatch, has: `CDI device "lpu.hyperaccel.ai/claim=c2" injected by a plugin`},
		"CDI device before final nodes": {ctr: ctr("c", seal(t, nd.Key, "lpu1")), adj: adjust([]string{"hyperaccel.ai/lpu=lpu4"}, nil),
			rule: verify.ErrPluginCDIDevice, reason: verify.ReasonMismatch, has: "injected by a plugin"},
		"its nodes lost": {ctr: ctr("c", seal(t, nd.Key, "lpu1")), adj: adjust(nil, nil),
			rule: verify.ErrFinalDevices, reason: verify.ReasonMismatch, has: "differ from its allocation (lpu1): missing lpu1 (509:1)"},
		"a plugin's LPU node": {ctr: ctr("c", seal(t, nd.Key, "lpu1")), adj: adjust(nil, append(own, lpuDev("/dev/lpu2", 2))),
			rule: verify.ErrFinalDevices, reason: verify.ReasonMismatch, has: "not allocated /dev/lpu2 (509:2, lpu2)"},
		"final nodes before final cgroup": {ctr: ctr("c", nil), adj: adjust(nil, []*api.LinuxDevice{lpuDev("/dev/lpu2", 2)}, rule(true, "c", lpuMajor, -1, "rw")),
			rule: verify.ErrFinalDevices, reason: verify.ReasonMismatch, has: "(none): not allocated /dev/lpu2"},
		"a plugin's cgroup rule": {ctr: ctr("c", seal(t, nd.Key, "lpu1")), adj: adjust(nil, own, rule(true, "c", lpuMajor, 2, "rw")),
			rule: verify.ErrNoOtherLPU, reason: verify.ReasonDeviceCgroup, has: "device cgroup admits LPUs it was not allocated (allocation lpu1): 509:2 (lpu2) rw"},
		"a claim's LPUs": {ctr: claimCtr("c", []string{"c2"}, 1), adj: adjust(nil, nil)},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := v.Validate(pod("x", nil), tc.ctr, tc.adj)
			if tc.rule == nil {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			wantRefusal(t, err, tc.rule, tc.reason, tc.has)
			for _, other := range validatorRules {
				if other != tc.rule && errors.Is(err, other) && (tc.rule != verify.ErrPluginCDIDevice || other != verify.ErrFinalDevices) {
					t.Errorf("refusal %v is also %q", err, other)
				}
			}
		})
	}
}

// TestValidatorInventoryFirst: without an inventory the validator's first
// check decides alone: a container without an allocation passes even with
// a plugin's LPU CDI device (nothing is known to be an LPU), one with a
// claim is refused.
func TestValidatorInventoryFirst(t *testing.T) {
	empty := inventory.New(device.NewSysfs(t.TempDir(), device.WithLogger(verifytest.Discard)), inventory.Options{Logger: verifytest.Discard})
	_, v := newVerifier(t, 8, false, withClaims(t), func(c *verify.Config) { c.Store = empty })
	adj := &api.ContainerAdjustment{CDIDevices: []*api.CDIDevice{{Name: "hyperaccel.ai/lpu=lpu4"}}}
	if err := v.Validate(pod("x", nil), ctr("c", nil), adj); err != nil {
		t.Errorf("unallocated container refused without inventory: %v", err)
	}
	err := v.Validate(pod("x", nil), claimCtr("c", []string{"c2"}, 1), adj)
	wantRefusal(t, err, verify.ErrKnownHealthy, verify.ReasonNoInventory, "cannot validate the container's devices")
	if errors.Is(err, verify.ErrFinalDevices) {
		t.Errorf("no-inventory refusal %v is also ErrFinalDevices", err)
	}
}

// TestAuditOpensOnce: the audit opens a container's allocation once for
// all its checks (held nodes, device cgroup rules, injected LPUs): for a
// claim container that is one read of lpu-dra's checkpoint, not one per
// check. The finding is unchanged: its claim covers what it holds.
func TestAuditOpensOnce(t *testing.T) {
	var reads atomic.Int32
	nd, v := newVerifier(t, 8, false, withClaims(t), func(c *verify.Config) {
		read := c.Claims
		c.Claims = func(pod string, uids []string) ([]string, error) {
			reads.Add(1)
			return read(pod, uids)
		}
	})
	c := claimCtr("x", []string{"c1"}, 4, 5, 6, 7)
	c.Linux.Resources = &api.LinuxResources{Devices: ctrRules(
		rule(true, "c", lpuMajor, 4, "rw"), rule(true, "c", lpuMajor, 5, "rw"),
		rule(true, "c", lpuMajor, 6, "rw"), rule(true, "c", lpuMajor, 7, "rw"))}
	if f := audit(nd, v, pod("x", nil), c); f.Unallocated != "" || f.Uninjected != "" {
		t.Fatalf("Audit = %+v, want nothing to report", f)
	}
	if n := reads.Load(); n != 1 {
		t.Fatalf("the audit read lpu-dra's claims %d times for one container, want 1", n)
	}
}

package verify

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/containerd/nri/pkg/api"

	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/devcgroup"
	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/inventory"
	"github.com/hyperaccel/lpu-node/pkg/inject"
)

// cgroupRules converts OCI device cgroup rules for devcgroup, appending to
// buf.
func cgroupRules(rules []*api.LinuxDeviceCgroup, buf []devcgroup.Rule) []devcgroup.Rule {
	for _, r := range rules {
		buf = append(buf, devcgroup.Rule{Allow: r.GetAllow(), Type: r.GetType(),
			Major: optional(r.GetMajor()), Minor: optional(r.GetMinor()), Access: r.GetAccess()})
	}
	return buf
}

// optional points into o (read only), nil for none: OptionalInt64.Get
// would copy the value to the heap for every rule.
func optional(o *api.OptionalInt64) *int64 {
	if o == nil {
		return nil
	}
	return &o.Value
}

// finalRules returns the device cgroup rules the container gets once adj
// is applied, in the runtime's order (NRI's generator): the pristine rules,
// an allow for each device adj adds, then adj's own rules.
func finalRules(pristine []*api.LinuxDeviceCgroup, adj *api.ContainerAdjustment) []devcgroup.Rule {
	rules := cgroupRules(pristine, nil)
	for _, d := range adj.GetLinux().GetDevices() {
		if _, remove := api.IsMarkedForRemoval(d.GetPath()); remove {
			continue // the runtime drops the node, not its cgroup rule
		}
		major, minor := d.GetMajor(), d.GetMinor()
		rules = append(rules, devcgroup.Rule{Allow: true, Type: d.GetType(), Major: &major, Minor: &minor, Access: d.AccessString()})
	}
	return cgroupRules(adj.GetLinux().GetResources().GetDevices(), rules)
}

// admittedBeyond returns the LPU device numbers rules admit (any access)
// that ids do not grant, described; nil when there are none. An LPU is
// every number of a discovered LPU's nodes and, on the lpu backend, any
// minor of the driver's major.
func admittedBeyond(snap *inventory.Snapshot, rules []devcgroup.Rule, ids []string) []string {
	if len(rules) == 0 {
		return nil // nothing is admitted without a rule
	}
	var gbuf [16]inventory.DevNum
	granted := want(snap, ids, gbuf[:0])
	var out []string
	own := snap.OwnMajors()
	majors := slices.Clone(own) // of every LPU number
	for _, d := range snap.Inventory.Devices {
		for _, n := range snap.Numbers(d.ID) {
			if !slices.Contains(majors, n.Major) {
				majors = append(majors, n.Major)
			}
		}
	}
	rules = devcgroup.ForMajors(rules, majors, make([]devcgroup.Rule, 0, len(rules)))
	if len(rules) == 0 {
		return nil
	}
	known := map[int64][]int64{} // minors of discovered LPUs on each own major
	for _, d := range snap.Inventory.Devices {
		for _, n := range snap.Numbers(d.ID) {
			if slices.Contains(own, n.Major) {
				known[n.Major] = append(known[n.Major], n.Minor)
			}
			if slices.Contains(granted, n) {
				continue
			}
			if a := devcgroup.Admitted(rules, n.Major, n.Minor); a != 0 {
				out = append(out, fmt.Sprintf("%d:%d (%s) %s", n.Major, n.Minor, d.ID, a))
			}
		}
	}
	for _, major := range own {
		if minor, ok := devcgroup.AdmitsOther(rules, major, known[major]); ok {
			out = append(out, fmt.Sprintf("other minors of major %d, the LPU driver's (%d:%d %s)",
				major, major, minor, devcgroup.Admitted(rules, major, minor)))
		}
	}
	return out
}

// cgroupRefusal refuses a container whose device cgroup rules admit LPUs
// beyond ids, outside security.allowNamespaces; nil otherwise. The device
// cgroup decides what the container can open, not its nodes: with
// CAP_MKNOD (in containerd's default capabilities) it can make the node.
func (v *Verifier) cgroupRefusal(snap *inventory.Snapshot, pod *api.PodSandbox, rules []devcgroup.Rule, ids []string) error {
	if !snap.Ready() || v.allowed(pod.GetNamespace()) {
		return nil
	}
	why := admittedBeyond(snap, rules, ids)
	if len(why) == 0 {
		return nil
	}
	alloc := inject.EncodeIDs(ids)
	if alloc == "" {
		alloc = "none"
	}
	return refuse(ErrNoOtherLPU, ReasonDeviceCgroup,
		"container's device cgroup admits LPUs it was not allocated (allocation %s): %s; a container may open only its allocated LPUs (privileged_without_host_devices_all_devices_allowed, a device cgroup rule or another plugin must not admit others); node agents that need them belong in a namespace listed in security.allowNamespaces",
		alloc, strings.Join(why, ", "))
}

// checkCgroup applies cgroupRefusal to the container's pristine rules
// (CreateContainer: lpu-nri adds its nodes itself, so no rule may admit an
// LPU beyond ids yet).
func (v *Verifier) checkCgroup(snap *inventory.Snapshot, pod *api.PodSandbox, ctr *api.Container, ids []string) error {
	devs := ctr.GetLinux().GetResources().GetDevices()
	if len(devs) == 0 {
		return nil
	}
	var buf [16]devcgroup.Rule
	return v.cgroupRefusal(snap, pod, cgroupRules(devs, buf[:0]), ids)
}

// cgroupCoverage is the audit's check of a running container's rules: ""
// when they admit no LPU beyond its allocation g (sealed, or its claims'),
// else why. An allocation that does not open grants nothing.
func (v *Verifier) cgroupCoverage(snap *inventory.Snapshot, pod *api.PodSandbox, c *api.Container, g grant) string {
	devs := c.GetLinux().GetResources().GetDevices()
	if len(devs) == 0 {
		return ""
	}
	var buf [16]devcgroup.Rule
	if err := v.cgroupRefusal(snap, pod, cgroupRules(devs, buf[:0]), g.ids); err != nil {
		var r *Refusal
		if errors.As(err, &r) {
			return r.Err.Error()
		}
		return err.Error()
	}
	return ""
}

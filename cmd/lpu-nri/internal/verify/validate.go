package verify

import (
	"fmt"
	"slices"
	"strings"

	"github.com/containerd/nri/pkg/api"

	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/inventory"
	"github.com/hyperaccel/lpu-node/pkg/inject"
)

// cdiKindPrefix starts the CDI device names of this project's kind.
const cdiKindPrefix = "hyperaccel.ai/lpu="

// node is one LPU device node a container holds: its path and number.
type node struct {
	path string
	num  inventory.DevNum
}

// lpuNodes appends to buf the LPU nodes among devs, judged by device
// number (a character device opening an LPU: type c, u or none), whatever
// the path.
func lpuNodes(snap *inventory.Snapshot, devs []*api.LinuxDevice, buf []node) []node {
	for _, d := range devs {
		if !inventory.IsCharType(d.GetType()) {
			continue
		}
		n := inventory.DevNum{Major: d.GetMajor(), Minor: d.GetMinor()}
		if snap.IsLPUNumber(n) {
			buf = append(buf, node{d.GetPath(), n})
		}
	}
	return buf
}

// finalNodes returns the LPU nodes the container will hold once adj is
// applied to its pristine devices: removals ("-path") drop a path, other
// entries add or replace one.
func finalNodes(snap *inventory.Snapshot, pristine []*api.LinuxDevice, adj *api.ContainerAdjustment) []node {
	var buf [16]*api.LinuxDevice
	devs := append(buf[:0], pristine...)
	for _, d := range adj.GetLinux().GetDevices() {
		path, remove := api.IsMarkedForRemoval(d.GetPath())
		devs = slices.DeleteFunc(devs, func(x *api.LinuxDevice) bool { return x.GetPath() == path })
		if !remove {
			devs = append(devs, d)
		}
	}
	var nbuf [16]node
	return lpuNodes(snap, devs, nbuf[:0])
}

// want returns the device numbers the allocation ids grant.
func want(snap *inventory.Snapshot, ids []string, buf []inventory.DevNum) []inventory.DevNum {
	for _, id := range ids {
		buf = append(buf, snap.Numbers(id)...)
	}
	return buf
}

// mismatch compares the held nodes with the granted numbers and says what
// differs, "" when the sets are equal. extraOK accepts held nodes beyond the
// grant (allowlisted namespaces).
func mismatch(snap *inventory.Snapshot, ids []string, granted []inventory.DevNum, held []node, extraOK bool) string {
	var missing, extra []string
	for _, g := range granted {
		if !slices.ContainsFunc(held, func(h node) bool { return h.num == g }) {
			id, _ := snap.Owner(g)
			missing = append(missing, fmt.Sprintf("%s (%d:%d)", id, g.Major, g.Minor))
		}
	}
	if !extraOK {
		for _, h := range held {
			if !slices.Contains(granted, h.num) {
				extra = append(extra, describe(snap, h))
			}
		}
	}
	if len(missing) == 0 && len(extra) == 0 {
		return ""
	}
	alloc := inject.EncodeIDs(ids)
	if alloc == "" {
		alloc = "none"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "the container's LPU device nodes differ from its allocation (%s):", alloc)
	if len(missing) > 0 {
		fmt.Fprintf(&b, " missing %s;", strings.Join(missing, ", "))
	}
	if len(extra) > 0 {
		fmt.Fprintf(&b, " not allocated %s;", strings.Join(extra, ", "))
	}
	return strings.TrimSuffix(b.String(), ";")
}

func describe(snap *inventory.Snapshot, h node) string {
	if id, ok := snap.Owner(h.num); ok {
		return fmt.Sprintf("%s (%d:%d, %s)", h.path, h.num.Major, h.num.Minor, id)
	}
	return fmt.Sprintf("%s (%d:%d)", h.path, h.num.Major, h.num.Minor)
}

// grant is a container's allocation as the validator and the audit judge
// it, opened once per container: the sealed annotation's IDs or, for a
// container with DRA claim devices, the LPUs of the claims lpu-dra's
// checkpoint says it prepared for the pod.
type grant struct {
	reserved string   // a reserved pod annotation key: the pod's allocation grants nothing
	ids      []string // nil unless the allocation opened
	err      error    // why it did not open (inject.ErrNoAllocation: it has none)
}

// openGrant opens the container's allocation (seal or claims) once, for
// every check of the validator or the audit on it. A pod with a reserved
// annotation key is not opened: nothing it carries grants LPUs.
func (v *Verifier) openGrant(pod *api.PodSandbox, ctr *api.Container) grant {
	if key, ok := inject.HasReservedKey(pod.GetAnnotations()); ok {
		return grant{reserved: key}
	}
	var g grant
	if claims := claimUIDs(ctr.GetCDIDevices()); len(claims) > 0 {
		g.ids, g.err = v.claimLPUs(pod, claims)
	} else {
		var alloc inject.Allocation
		alloc, g.err = v.key.OpenAllocation(ctr.GetAnnotations())
		g.ids = alloc.IDs
	}
	if g.err != nil {
		g.ids = nil
	}
	return g
}

// verified returns the container's allocation under the trust rules that
// need no call to the kubelet (pod annotations, seal, version, inventory):
// g's IDs when every one is a known, healthy LPU. Anything that does not
// verify grants nothing.
func verified(snap *inventory.Snapshot, g grant) []string {
	for _, id := range g.ids {
		if d, ok := snap.Device(id); !ok || !d.Health.Healthy {
			return nil
		}
	}
	return g.ids
}

// allowed reports whether the namespace may hold LPU nodes without an
// allocation (security.allowNamespaces: node agents that run privileged).
func (v *Verifier) allowed(namespace string) bool {
	return slices.Contains(v.allowNS, namespace)
}

// Validate is the validator's check (package doc, Validator and audit),
// without logging or metrics: a list of checks in the documented order,
// each returning its rule's *Refusal.
func (v *Verifier) Validate(pod *api.PodSandbox, ctr *api.Container, adj *api.ContainerAdjustment) error {
	snap := v.store.Load()
	if !snap.Ready() {
		return validateInventory(snap, ctr)
	}
	if err := validateNoLPUCDIDevices(adj); err != nil {
		return err
	}
	ids := verified(snap, v.openGrant(pod, ctr))
	if err := v.validateFinalNodes(snap, pod, ctr, adj, ids); err != nil {
		return err
	}
	return v.validateFinalCgroup(snap, pod, ctr, adj, ids)
}

// validateInventory is the validator's check without an inventory:
// nothing is known to be an LPU, so no other check can run. Containers
// with an allocation were refused by CreateContainer; the others must keep
// starting (a node whose driver is not loaded still runs its CNI and
// agents).
func validateInventory(snap *inventory.Snapshot, ctr *api.Container) error {
	if _, ok := ctr.GetAnnotations()[inject.AnnotationDevices]; ok || len(claimUIDs(ctr.GetCDIDevices())) > 0 {
		return refuse(ErrKnownHealthy, ReasonNoInventory, "no LPU inventory yet (%v); cannot validate the container's devices", snap.Err)
	}
	return nil
}

// validateNoLPUCDIDevices refuses an LPU CDI device (this project's kind,
// or an lpu-dra claim's) that a plugin adds: LPUs come only from lpu-nri's
// own nodes or the pod spec's claims.
func validateNoLPUCDIDevices(adj *api.ContainerAdjustment) error {
	for _, c := range adj.GetCDIDevices() {
		if strings.HasPrefix(c.GetName(), cdiKindPrefix) || strings.HasPrefix(c.GetName(), inject.ClaimKind+"=") {
			return refuse(ErrPluginCDIDevice, ReasonMismatch, "CDI device %q injected by a plugin: LPUs reach a container only through lpu-nri's verified allocation or a claim in its pod spec", c.GetName())
		}
	}
	return nil
}

// validateFinalNodes refuses a container whose final LPU nodes, by device
// number, differ from its verified allocation ids (held beyond it only in
// security.allowNamespaces).
func (v *Verifier) validateFinalNodes(snap *inventory.Snapshot, pod *api.PodSandbox, ctr *api.Container, adj *api.ContainerAdjustment, ids []string) error {
	var gbuf [16]inventory.DevNum
	granted := want(snap, ids, gbuf[:0])
	held := finalNodes(snap, ctr.GetLinux().GetDevices(), adj)
	if why := mismatch(snap, ids, granted, held, v.allowed(pod.GetNamespace())); why != "" {
		return refuse(ErrFinalDevices, ReasonMismatch, "%s", why)
	}
	return nil
}

// validateFinalCgroup refuses a container whose final device cgroup rules
// (the pristine ones, an allow for each added node, adj's own) admit an
// LPU beyond its verified allocation ids: No other LPU on what the merged
// adjustment makes of it.
func (v *Verifier) validateFinalCgroup(snap *inventory.Snapshot, pod *api.PodSandbox, ctr *api.Container, adj *api.ContainerAdjustment, ids []string) error {
	return v.cgroupRefusal(snap, pod, finalRules(ctr.GetLinux().GetResources().GetDevices(), adj), ids)
}

// privileged reports whether the container's device cgroup admits every
// device (a privileged container): removing nodes from its spec does not
// keep it from opening them.
func privileged(ctr *api.Container) bool {
	for _, r := range ctr.GetLinux().GetResources().GetDevices() {
		if r.GetAllow() && (r.GetType() == "" || r.GetType() == "a") && r.GetMajor() == nil && r.GetMinor() == nil {
			return true
		}
	}
	return false
}

// foreignNodes refuses a container that already carries LPU nodes beyond
// ids (a privileged pod, another device plugin, a CDI device, the NRI
// device-injector), unless its namespace is allowlisted. Removing them
// instead is not possible: NRI v0.12 drops a plugin's removal of a device
// the pristine container carries from the merged adjustment, and a
// privileged container could open the nodes anyway.
func (v *Verifier) foreignNodes(snap *inventory.Snapshot, pod *api.PodSandbox, ctr *api.Container, ids []string) error {
	var hbuf [16]node
	held := lpuNodes(snap, ctr.GetLinux().GetDevices(), hbuf[:0])
	if len(held) == 0 || v.allowed(pod.GetNamespace()) {
		return nil
	}
	var gbuf [16]inventory.DevNum
	granted := want(snap, ids, gbuf[:0])
	var extra []string
	for _, h := range held {
		if !slices.Contains(granted, h.num) {
			extra = append(extra, describe(snap, h))
		}
	}
	if len(extra) == 0 {
		return nil
	}
	kind := "container"
	if privileged(ctr) {
		kind = "privileged container"
	}
	return refuse(ErrNoOtherLPU, ReasonUnallocatedNodes,
		"%s carries LPU device nodes it was not allocated (%s): LPUs reach a container only through an allocation from the device plugin (another device plugin, a CDI device or privileged mode must not hand them out); node agents that need them belong in a namespace listed in security.allowNamespaces",
		kind, strings.Join(extra, ", "))
}

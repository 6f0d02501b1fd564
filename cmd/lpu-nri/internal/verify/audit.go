package verify

import (
	"fmt"

	"github.com/containerd/nri/pkg/api"

	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/inventory"
	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/inject"
)

// Finding is what the audit's rules say about one running container.
type Finding struct {
	// Unallocated says why the container holds LPUs (nodes or device
	// cgroup rules) that no valid allocation of its covers; "" when none.
	Unallocated string
	// Held lists the LPU node paths the container holds.
	Held []string
	// Uninjected says why the container runs without LPUs its verified
	// allocation names (e.g. created while lpu-nri's CreateContainer timed
	// out); "" when it holds them all. Judged only without Unallocated.
	Uninjected string
}

// Audit judges a running container against its allocation, for the
// periodic audit. Containers in security.allowNamespaces may hold nodes
// they were not allocated. snap is the audit's one view of the inventory;
// the allocation is opened once (openGrant) for every check.
func (v *Verifier) Audit(snap *inventory.Snapshot, pod *api.PodSandbox, c *api.Container) Finding {
	var f Finding
	g := v.openGrant(pod, c)
	held := auditNodes(snap, c.GetLinux().GetDevices())
	if !v.allowed(pod.GetNamespace()) {
		if why := v.holderWhy(snap, pod, c, g, held); why != "" {
			f.Unallocated = why
			for _, d := range held {
				f.Held = append(f.Held, d.path)
			}
			return f
		}
	}
	ids := verified(snap, g)
	if len(ids) == 0 {
		return f
	}
	var gbuf [16]inventory.DevNum
	f.Uninjected = mismatch(snap, ids, want(snap, ids, gbuf[:0]), held, true)
	return f
}

// holderWhy returns why the container holds LPUs no valid allocation of
// its covers, "" when it does not: LPU nodes (coverage), or device cgroup
// rules admitting LPUs (cgroupCoverage).
func (v *Verifier) holderWhy(snap *inventory.Snapshot, pod *api.PodSandbox, c *api.Container, g grant, held []node) string {
	if len(held) > 0 {
		if why := coverage(snap, g, held); why != "" {
			return why
		}
	}
	return v.cgroupCoverage(snap, pod, c, g)
}

// coverage returns "" when the container's allocation g (sealed, or its DRA
// claims') covers every held node, else why not. A node is judged by what
// it opens, its device number, not by its path: /dev/accel with lpu3's
// number is lpu3, and /dev/lpu3 with lpu5's number is lpu5. Only an
// allocated ID the inventory no longer knows falls back to its path. snap
// is the audit's one view of the inventory, the same it found the held
// nodes with.
func coverage(snap *inventory.Snapshot, g grant, held []node) string {
	switch {
	case g.reserved != "":
		return fmt.Sprintf("pod annotation %q", g.reserved)
	case g.err != nil:
		return g.err.Error()
	}
	type number struct{ major, minor int64 }
	numbers := make(map[number]bool, len(g.ids))
	paths := make(map[string]bool)
	for _, id := range g.ids {
		if d, ok := snap.Device(id); ok {
			for _, n := range d.NodeList() {
				numbers[number{n.Major, n.Minor}] = true
			}
		} else {
			paths[device.DevDir+"/"+id] = true
		}
	}
	for _, h := range held {
		if !numbers[number{h.num.Major, h.num.Minor}] && !paths[h.path] {
			return fmt.Sprintf("%s (%d:%d) is not in its allocation %s", h.path, h.num.Major, h.num.Minor, inject.EncodeIDs(g.ids))
		}
	}
	return ""
}

// auditNodes returns the LPU nodes among devs for the audit: by device
// number, and also any /dev/lpuN path whatever its number (a node the
// inventory no longer knows is still reported).
func auditNodes(snap *inventory.Snapshot, devs []*api.LinuxDevice) []node {
	var held []node
	for _, d := range devs {
		n := inventory.DevNum{Major: d.GetMajor(), Minor: d.GetMinor()}
		if snap.IsLPUNode(d.GetPath(), d.GetType(), n.Major, n.Minor) {
			held = append(held, node{d.GetPath(), n})
		}
	}
	return held
}

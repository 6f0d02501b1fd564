package config

import (
	"fmt"
	"strconv"
)

// DRA configures lpu-dra; the other daemons ignore it.
type DRA struct {
	// ArcSizes are the arc sizes lpu-dra publishes as devices; empty (the
	// default) publishes every arc of every ring. The scheduler's
	// allocator evaluates each published device of each node it checks,
	// so publishing only the sizes the cluster's DeviceClasses offer makes
	// every DRA pod cheaper to schedule (docs/dra.md, "Scale").
	ArcSizes []int `json:"arcSizes"`
	// NodeLabels, true when unset, has lpu-dra keep the labels
	// lpu.hyperaccel.ai/largest-free-arc and lpu.hyperaccel.ai/free-lpus
	// on its own Node: the hint the chart's prefilter policy turns into
	// a node affinity for pods of the arc classes (docs/dra.md,
	// "Node-label prefilter"). false: the Node is never labelled.
	NodeLabels *bool `json:"nodeLabels,omitempty"`
	// DeviceClasses are the DeviceClasses through which a claim may get
	// lpu-dra's devices: Prepare refuses a claim whose request names
	// another (the admission policies key on these names). Empty (the
	// default): lpu.hyperaccel.ai, lpu-count.hyperaccel.ai and
	// lpu-arc-<k>.hyperaccel.ai for every k up to MaxArcSize. The chart
	// sets the classes it creates.
	DeviceClasses []string `json:"deviceClasses"`
}

// Classes are the DeviceClasses lpu-dra prepares claims of: DeviceClasses,
// or when empty the chart's names for every arc size.
func (d *DRA) Classes() []string {
	if len(d.DeviceClasses) > 0 {
		return d.DeviceClasses
	}
	out := []string{"lpu.hyperaccel.ai", "lpu-count.hyperaccel.ai"}
	for k := 1; k <= MaxArcSize; k++ {
		out = append(out, fmt.Sprintf("lpu-arc-%d.hyperaccel.ai", k))
	}
	return out
}

// LabelsNode reports whether lpu-dra keeps its Node's labels.
func (d *DRA) LabelsNode() bool { return d.NodeLabels == nil || *d.NodeLabels }

// MaxArcSize is the largest arc: a DRA counter set holds at most 32
// counters, one per LPU of a ring.
const MaxArcSize = 32

func (d *DRA) validate(v *validator) {
	for i, c := range d.DeviceClasses {
		if c == "" {
			v.add(fmt.Sprintf("dra.deviceClasses[%d]", i), c, "must name a DeviceClass")
		}
	}
	seen := map[int]int{}
	for i, k := range d.ArcSizes {
		p := fmt.Sprintf("dra.arcSizes[%d]", i)
		if j, dup := seen[k]; dup {
			v.add(p, strconv.Itoa(k), "duplicates dra.arcSizes[%d]", j)
		}
		seen[k] = i
		if k < 1 || k > MaxArcSize {
			v.add(p, strconv.Itoa(k), "must be 1..%d LPUs", MaxArcSize)
		}
	}
}

package arcslice

import (
	"strconv"

	"github.com/hyperaccel/lpu-node/pkg/alloc"
	"github.com/hyperaccel/lpu-node/pkg/inject"
)

// Node labels lpu-dra keeps on its own Node as a scheduling hint (the
// chart's prefilter policy gives pods of the arc classes a required node
// affinity on them, so the scheduler's NodeAffinity filter drops nodes
// before the costlier DRA filter). Values are decimal sizes from Free.
const (
	LabelLargestFreeArc = inject.Driver + "/largest-free-arc"
	LabelFreeLPUs       = inject.Driver + "/free-lpus"
)

// Free is what a node can still give a new claim, counted in the arc
// sizes the builder publishes: from Builder.Free a value is always a
// published size or 0, so "a claim of a published size k fits" implies
// "value ≥ k"; Holding may raise it further.
type Free struct {
	// Arc is the largest size of a published arc a new claim could be
	// given (untainted, touching no held LPU), 0 when there is none.
	Arc int
	// LPUs is the number of healthy, uncordoned LPUs no claim holds,
	// rounded down to a published size (0 below the smallest): what a
	// best-effort claim of k singles needs.
	LPUs int
}

// Free summarises the same view FreeSlices publishes for held and
// unhealthy: Arc is the largest size among the untainted arcs of
// FreeSlices(held, nil, unhealthy), LPUs the free healthy LPU count;
// cordoned LPUs (WithCordoned) count as unhealthy.
func (b *Builder) Free(held []string, unhealthy map[string]bool) Free {
	busy := b.unavailable(held, unhealthy)
	var free []string
	for _, ring := range b.layout.Rings() {
		for _, id := range ring {
			if !busy[id] {
				free = append(free, id)
			}
		}
	}
	var f Free
	for _, longest := range b.layout.LargestFreeArc(free) {
		for k := longest; k > f.Arc; k-- {
			if b.publishes(k) {
				f.Arc = k
				break
			}
		}
	}
	f.LPUs = b.floor(len(free))
	return f
}

// publishes reports whether arcs of size k are published.
func (b *Builder) publishes(k int) bool {
	return k >= 1 && (b.publish == nil || (k < len(b.publish) && b.publish[k]))
}

// floor is the largest published size ≤ n, 0 when none is.
func (b *Builder) floor(n int) int {
	if b.publish == nil {
		return n
	}
	for k := min(n, len(b.publish)-1); k >= 1; k-- {
		if b.publish[k] {
			return k
		}
	}
	return 0
}

// Holding raises f to what a prepared claim holding arcs was given: Arc
// to its largest arc, LPUs to its LPU count. The labels must never fall
// below what a pod running on the node was admitted with: the kubelet
// re-checks every pod's required node affinity against the node's labels
// when it restarts (v1.37) and ends a pod that no longer matches, and the
// prefilter's requirement is what the pod's own claim took away. A node
// so labelled is filtered by DRA instead, as without the prefilter.
func (f Free) Holding(arcs []alloc.Arc) Free {
	n := 0
	for _, a := range arcs {
		f.Arc = max(f.Arc, a.Size)
		n += a.Size
	}
	f.LPUs = max(f.LPUs, n)
	return f
}

// Labels returns f as the values of LabelLargestFreeArc and LabelFreeLPUs.
func (f Free) Labels() map[string]string {
	return map[string]string{
		LabelLargestFreeArc: strconv.Itoa(f.Arc),
		LabelFreeLPUs:       strconv.Itoa(f.LPUs),
	}
}

package main

import (
	"math"
	"slices"
)

// The priority workload (-workload priority) measures priority and
// preemption as the stock scheduler does them today: the nodes are filled
// with low-priority 1- and 2-LPU pods, then high-priority 4- and 8-LPU
// pods are submitted one at a time, each given -high-wait to start
// (priority_run.go). These are its measures.

// PriorityClasses the harness creates for the priority workload.
const (
	classLow       = "lpu-bench-low"
	classHigh      = "lpu-bench-high"
	classLowValue  = 1000
	classHighValue = 1000000
)

// fewestVictims is the fewest pods that must go for a k-arc of one ring
// to be free: every arc of k positions on a ring of at least k LPUs
// (wrap-around; the whole ring once when k is its size) is tried, and an
// arc needs every pod holding one of its LPUs evicted. owner maps a held
// LPU to its pod; only pods in lower may be evicted, so an arc touching
// another pod's LPU is out. It returns -1 when no arc can be freed.
//
// Any set of victims that completes an arc contains every pod on that
// arc, so the arcs' pod sets are the only minimal candidates: this is the
// brute force over victim sets, done over arcs.
func fewestVictims(rings [][]string, owner map[string]string, lower map[string]bool, k int) int {
	best := -1
	for _, ring := range rings {
		n := len(ring)
		if k > n || k < 1 {
			continue
		}
		starts := n
		if k == n {
			starts = 1
		}
		for s := 0; s < starts; s++ {
			pods, ok := arcPods(ring, s, k, owner, lower)
			if ok && (best < 0 || len(pods) < best) {
				best = len(pods)
			}
		}
	}
	return best
}

// arcPods are the distinct pods holding an LPU of the arc of k from
// start on ring, and whether all of them may be evicted.
func arcPods(ring []string, start, k int, owner map[string]string, lower map[string]bool) ([]string, bool) {
	var pods []string
	for i := 0; i < k; i++ {
		p, held := owner[ring[(start+i)%len(ring)]]
		if !held {
			continue
		}
		if !lower[p] {
			return nil, false
		}
		if !slices.Contains(pods, p) {
			pods = append(pods, p)
		}
	}
	return pods, true
}

// highOutcome is what became of one high-priority pod: its wait (seconds
// from creation to start, +Inf when it did not start within the budget),
// where it started and whether contiguously, whether the node side
// refused it (strict), the victims evicted while it waited by node, and
// the fewest victims any node needed for it when it was submitted
// (fewestVictims, -1: none could free an arc).
type highOutcome struct {
	name    string
	size    int
	wait    float64
	node    string
	contig  bool
	refused bool
	victims map[string]int
	fewest  int
}

// started says whether the pod started within the budget.
func (o highOutcome) started() bool { return !math.IsInf(o.wait, 1) && !o.refused }

// prioRow is one arm of the priority workload.
type prioRow struct {
	Arm                  string
	High, Started        int // high-priority pods submitted, started within the budget
	Contiguous, Refused  int // of those started, on an arc; refused by the node side (strict)
	WaitP50, WaitP99     float64
	Preemptions, Victims int // high pods with victims, and their victims
	// Fewest sums, over the preemptions, the fewest victims any node
	// needed for that pod (fewestVictims at its submission).
	Fewest int
	// FreedNothing are victims evicted on a node where their preemptor
	// did not then start on an arc.
	FreedNothing int
	LowPods      int     // low-priority pods running when the first high one came
	Budget       float64 // -high-wait, seconds
	Message      string  // the scheduler's last condition on a pod that never started
	Errors       []string
}

// tallyPriority turns the outcomes into the arm's measures. Waits are
// every high pod's, a pod that never started counting as +Inf, so a
// percentile that falls on one is "never within the budget".
func tallyPriority(arm string, outs []highOutcome) prioRow {
	w := prioRow{Arm: arm, High: len(outs)}
	var waits []float64
	for _, o := range outs {
		wait := o.wait
		if o.refused {
			wait = math.Inf(1)
		}
		waits = append(waits, wait)
		if o.refused {
			w.Refused++
		}
		if o.started() {
			w.Started++
			if o.contig {
				w.Contiguous++
			}
		}
		n := 0
		for node, v := range o.victims {
			n += v
			if !o.started() || !o.contig || o.node != node {
				w.FreedNothing += v
			}
		}
		if n > 0 {
			w.Preemptions++
			w.Victims += n
			w.Fewest += max(o.fewest, 0)
		}
	}
	w.WaitP50, w.WaitP99 = percentile(waits, 0.5), percentile(waits, 0.99)
	return w
}

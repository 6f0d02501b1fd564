package main

import (
	"container/heap"

	"github.com/hyperaccel/lpu-node/lab/churn"
)

// countBound replays jobs on nodes of the given LPU counts under perfect
// compaction: a k-pod can start when some node has k free LPUs (it goes
// to the fullest node that fits), waits otherwise, and waiting pods are
// retried in arrival order whenever LPUs free up. Lifetimes run from the
// start; the horizon is one unit after the last arrival. It returns how
// many multi-LPU pods started before the horizon.
func countBound(jobs []churn.Job, capacity []int) int {
	free := append([]int(nil), capacity...)
	horizon := jobs[len(jobs)-1].Arrive + 1
	var ends endHeap
	var waiting []int
	started := 0
	place := func(i int, now float64) bool {
		best := -1
		for n, f := range free {
			if f >= jobs[i].Size && (best < 0 || f < free[best]) {
				best = n
			}
		}
		if best < 0 {
			return false
		}
		free[best] -= jobs[i].Size
		heap.Push(&ends, end{at: now + (jobs[i].End - jobs[i].Arrive), node: best, size: jobs[i].Size})
		if jobs[i].Size > 1 {
			started++
		}
		return true
	}
	retry := func(now float64) {
		kept := waiting[:0]
		for _, w := range waiting {
			if !place(w, now) {
				kept = append(kept, w)
			}
		}
		waiting = kept
	}
	for i, j := range jobs {
		for ends.Len() > 0 && ends[0].at <= j.Arrive {
			e := heap.Pop(&ends).(end)
			free[e.node] += e.size
			retry(e.at)
		}
		if !place(i, j.Arrive) {
			waiting = append(waiting, i)
		}
	}
	for ends.Len() > 0 && ends[0].at <= horizon {
		e := heap.Pop(&ends).(end)
		free[e.node] += e.size
		retry(e.at)
	}
	return started
}

type end struct {
	at         float64
	node, size int
}

type endHeap []end

func (h endHeap) Len() int           { return len(h) }
func (h endHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h endHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *endHeap) Push(x any)        { *h = append(*h, x.(end)) }
func (h *endHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

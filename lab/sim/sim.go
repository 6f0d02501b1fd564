package main

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/hyperaccel/lpu-node/lab/churn"
	"github.com/hyperaccel/lpu-node/pkg/alloc"
)

// Built-in mixes besides churn.MixDefault. The job stream (churn.Mix,
// churn.Job, churn.Generate) lives in lab/churn, shared with the cluster
// harness (lab/cluster), so both replay the same workload.
var (
	MixSmall = churn.Mix{Name: "all-small", Sizes: []int{1, 2}, Weights: []int{50, 50}}
	MixLarge = churn.Mix{Name: "all-large", Sizes: []int{4, 8}, Weights: []int{50, 50}}
)

// ParseMix reads a built-in mix name or "size:weight,…".
func ParseMix(s string) (churn.Mix, error) {
	for _, m := range []churn.Mix{churn.MixDefault, MixSmall, MixLarge} {
		if s == m.Name {
			return m, nil
		}
	}
	m := churn.Mix{Name: s}
	for _, part := range strings.Split(s, ",") {
		sz, wt, ok := strings.Cut(strings.TrimSpace(part), ":")
		if !ok {
			return churn.Mix{}, fmt.Errorf("mix %q: entry %q is not size:weight", s, part)
		}
		size, err := strconv.Atoi(sz)
		if err != nil || size < 1 || size > 1024 {
			return churn.Mix{}, fmt.Errorf("mix %q: size %q is not an integer in 1..1024", s, sz)
		}
		w, err := strconv.Atoi(wt)
		if err != nil || w < 1 || w > 1_000_000 {
			return churn.Mix{}, fmt.Errorf("mix %q: weight %q is not an integer in 1..1000000", s, wt)
		}
		m.Sizes = append(m.Sizes, size)
		m.Weights = append(m.Weights, w)
	}
	return m, nil
}

// Node is a ring topology to simulate.
type Node struct {
	Name  string
	Rings [][]string
}

// Capacity is the number of LPUs on the node.
func (n Node) Capacity() int {
	c := 0
	for _, r := range n.Rings {
		c += len(r)
	}
	return c
}

// ParseNode reads "RxN": R rings of N LPUs each, numbered lpu0… ring by ring.
func ParseNode(s string) (Node, error) {
	rs, ns, ok := strings.Cut(s, "x")
	r, err1 := strconv.Atoi(rs)
	n, err2 := strconv.Atoi(ns)
	if !ok || err1 != nil || err2 != nil || r < 1 || n < 1 || r*n > 1024 {
		return Node{}, fmt.Errorf("node %q: want RINGSxLPUS such as 1x8 or 2x8 (at most 1024 LPUs)", s)
	}
	node := Node{Name: s}
	for i := 0; i < r; i++ {
		ring := make([]string, n)
		for j := range ring {
			ring[j] = "lpu" + strconv.Itoa(i*n+j)
		}
		node.Rings = append(node.Rings, ring)
	}
	return node, nil
}

// Policy chooses devices for a request, like a device plugin's preferred
// allocation (or its absence). available is in layout order (ring by ring,
// each in ring order); the answer must be size IDs out of it, or nil.
type Policy interface {
	Name() string
	Pick(available []string, size int) []string
}

// oracle is a policy that is told the future: the new job's end time and
// the end time of the job on every LPU (flat layout order). No real device
// plugin knows this; the ablation uses it to bound what lifetime hints
// could buy.
type oracle interface {
	See(jobEnd float64, endAt []float64)
}

// kubeletDefault is kubelet without a preferred allocation: an arbitrary
// choice from the available set (kubelet walks a Go map; here a seeded
// shuffle, so runs are reproducible).
type kubeletDefault struct{ rng *rand.Rand }

func newKubeletDefault(seed uint64) *kubeletDefault {
	return &kubeletDefault{rng: rand.New(rand.NewPCG(seed, 0x6b756265))} // "kube"
}

func (*kubeletDefault) Name() string { return "kubelet-default" }

func (k *kubeletDefault) Pick(available []string, size int) []string {
	if size > len(available) {
		return nil
	}
	a := append([]string(nil), available...)
	for i := 0; i < size; i++ {
		j := i + k.rng.IntN(len(a)-i)
		a[i], a[j] = a[j], a[i]
	}
	return a[:size]
}

// firstFit takes the lowest-index free arc (ring by ring, wrap-around arcs
// included, lowest start first); with no arc, the lowest-index free devices.
type firstFit struct{ node Node }

func (firstFit) Name() string { return "first-fit" }

func (f firstFit) Pick(available []string, size int) []string {
	if size > len(available) {
		return nil
	}
	free := make(map[string]bool, len(available))
	for _, id := range available {
		free[id] = true
	}
	for _, ring := range f.node.Rings {
		n := len(ring)
		if size > n {
			continue
		}
	starts:
		for s := 0; s < n; s++ {
			for i := 0; i < size; i++ {
				if !free[ring[(s+i)%n]] {
					continue starts
				}
			}
			out := make([]string, size)
			for i := range out {
				out[i] = ring[(s+i)%n]
			}
			return out
		}
	}
	return append([]string(nil), available[:size]...)
}

// ours is pkg/alloc's Preferred.
type ours struct{ l *alloc.Layout }

func (ours) Name() string { return "pkg/alloc" }

func (o ours) Pick(available []string, size int) []string {
	return o.l.Preferred(available, nil, size)
}

// CountBound is the name of the count bound row: a request is served
// whenever free ≥ size, as perfect compaction would allow.
const CountBound = "count-bound"

// Result is what one policy achieved on one job sequence.
type Result struct {
	Policy        string
	Arrivals      int
	Admitted      int     // placements made (best-effort: free ≥ size)
	Contiguous    int     // admissions on one ring-contiguous arc
	NonContiguous int     // best-effort: admitted but scattered; strict: refused for it
	SumLargestArc float64 // sum over arrivals of the node's largest free arc after the arrival
	SumBusy       float64 // sum over arrivals of busy LPUs at the arrival
	BySize        map[int][2]int
	// ArcFree counts arrivals that found a free arc of their size, and
	// ContiguousWhenArcFree those of them the policy placed on one: how
	// often it finds an arc that exists.
	ArcFree, ContiguousWhenArcFree int
}

// Rate is contiguous admissions per arrival.
func (r Result) Rate() float64 { return float64(r.Contiguous) / float64(r.Arrivals) }

// MeanLargestArc is the mean largest free arc after each arrival.
func (r Result) MeanLargestArc() float64 { return r.SumLargestArc / float64(r.Arrivals) }

// Utilisation is the mean fraction of busy LPUs seen by arrivals.
func (r Result) Utilisation(capacity int) float64 {
	return r.SumBusy / float64(r.Arrivals) / float64(capacity)
}

// endHeap orders running jobs by end time, then job index.
type endHeap []int32

type running struct {
	jobs []churn.Job
	h    endHeap
}

func (r *running) Len() int { return len(r.h) }
func (r *running) Less(i, j int) bool {
	a, b := r.jobs[r.h[i]], r.jobs[r.h[j]]
	if a.End != b.End {
		return a.End < b.End
	}
	return r.h[i] < r.h[j]
}
func (r *running) Swap(i, j int) { r.h[i], r.h[j] = r.h[j], r.h[i] }
func (r *running) Push(x any)    { r.h = append(r.h, x.(int32)) }
func (r *running) Pop() any {
	x := r.h[len(r.h)-1]
	r.h = r.h[:len(r.h)-1]
	return x
}

// Simulate replays jobs on node with policy p (nil: the count bound). In
// strict mode a non-contiguous pick is refused, as the strict allocation
// policy would; otherwise it is admitted and counted.
func Simulate(node Node, jobs []churn.Job, p Policy, strict bool) (Result, error) {
	r, err := newReplay(node, jobs, p)
	if err != nil {
		return Result{}, err
	}
	res := Result{Policy: r.name, Arrivals: len(jobs), BySize: map[int][2]int{}}
	capacity := node.Capacity()
	maxRing := 0
	for _, ring := range node.Rings {
		maxRing = max(maxRing, len(ring))
	}
	for i, job := range jobs {
		r.departBy(job.Arrive)
		res.SumBusy += float64(capacity - r.free)
		bs := res.BySize[job.Size]
		bs[0]++

		admitted, contiguous := false, false
		var pick []int
		if job.Size <= r.free {
			if p == nil {
				admitted, contiguous = true, true
			} else {
				arcFree := r.largestArc() >= job.Size
				if pick, contiguous, err = r.pick(job); err != nil {
					return Result{}, err
				}
				if arcFree {
					res.ArcFree++
					if contiguous {
						res.ContiguousWhenArcFree++
					}
				}
				admitted = contiguous || !strict
				if !contiguous {
					res.NonContiguous++
				}
			}
		}
		if admitted {
			res.Admitted++
			r.admit(i, job, pick)
		}
		if contiguous && admitted {
			res.Contiguous++
			bs[1]++
		}
		res.BySize[job.Size] = bs

		if p == nil {
			res.SumLargestArc += float64(min(r.free, maxRing))
		} else {
			res.SumLargestArc += float64(r.largestArc())
		}
	}
	return res, nil
}

// replay is the node's state during one Simulate run.
type replay struct {
	layout    *alloc.Layout
	p         Policy
	name      string
	jobs      []churn.Job
	order     []string       // flat layout order: ring by ring
	index     map[string]int // position of each LPU in order
	busy      []bool
	endAt     []float64 // end time of the job on each busy LPU (oracle policies only)
	held      [][]int   // flat indices each running job holds
	free      int
	run       *running
	available []string
}

func newReplay(node Node, jobs []churn.Job, p Policy) (*replay, error) {
	layout, err := alloc.NewLayout(node.Rings)
	if err != nil {
		return nil, err
	}
	r := &replay{layout: layout, p: p, name: CountBound, jobs: jobs, held: make([][]int, len(jobs)),
		free: node.Capacity(), run: &running{jobs: jobs}, available: make([]string, 0, node.Capacity())}
	if p != nil {
		r.name = p.Name()
	}
	for _, ring := range node.Rings {
		r.order = append(r.order, ring...)
	}
	r.index = make(map[string]int, len(r.order))
	for i, id := range r.order {
		r.index[id] = i
	}
	r.busy = make([]bool, len(r.order))
	r.endAt = make([]float64, len(r.order))
	return r, nil
}

// departBy frees the LPUs of every running job that ended by t.
func (r *replay) departBy(t float64) {
	for r.run.Len() > 0 && r.jobs[r.run.h[0]].End <= t {
		j := heap.Pop(r.run).(int32)
		for _, x := range r.held[j] {
			r.busy[x] = false
		}
		r.free += r.jobs[j].Size
		r.held[j] = nil
	}
}

// freeIDs returns the free LPUs in layout order (reusing one buffer).
func (r *replay) freeIDs() []string {
	r.available = r.available[:0]
	for x, id := range r.order {
		if !r.busy[x] {
			r.available = append(r.available, id)
		}
	}
	return r.available
}

// pick asks the policy for job's LPUs and checks them: the size asked,
// on the node, free. It returns their flat indices and whether they are
// one contiguous arc.
func (r *replay) pick(job churn.Job) ([]int, bool, error) {
	available := r.freeIDs()
	if o, ok := r.p.(oracle); ok {
		o.See(job.End, r.endAt)
	}
	ids := r.p.Pick(available, job.Size)
	if len(ids) != job.Size {
		return nil, false, fmt.Errorf("%s picked %v for size %d out of %v", r.name, ids, job.Size, available)
	}
	pl, err := r.layout.Check(ids)
	if err != nil {
		return nil, false, fmt.Errorf("%s picked %v: %w", r.name, ids, err)
	}
	var pick []int
	for _, id := range ids {
		x := r.index[id]
		if r.busy[x] {
			return nil, false, fmt.Errorf("%s picked busy %s", r.name, id)
		}
		pick = append(pick, x)
	}
	return pick, pl.Contiguous, nil
}

// admit runs job i on the LPUs of pick until its end.
func (r *replay) admit(i int, job churn.Job, pick []int) {
	r.free -= job.Size
	for _, x := range pick {
		r.busy[x] = true
		r.endAt[x] = job.End
	}
	r.held[i] = pick
	heap.Push(r.run, int32(i))
}

// largestArc is the size of the largest free arc now.
func (r *replay) largestArc() int {
	largest := 0
	for _, a := range r.layout.LargestFreeArc(r.freeIDs()) {
		largest = max(largest, a)
	}
	return largest
}

package main

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/hyperaccel/lpu-node/lab/churn"
)

// gangShape is a gang: Pods pods, each holding one contiguous Size-arc.
// Min, when set, is the PodGroup's minCount instead of Pods: above Pods it
// is the bad input of a gang that can never be whole.
type gangShape struct{ Pods, Size, Min int }

func (g gangShape) String() string {
	s := strconv.Itoa(g.Pods) + "x" + strconv.Itoa(g.Size)
	if g.Min != 0 {
		s += "m" + strconv.Itoa(g.Min)
	}
	return s
}

// minCount is the gang's PodGroup minCount.
func (g gangShape) minCount() int {
	if g.Min != 0 {
		return g.Min
	}
	return g.Pods
}

// defaultGangMix are the gangs of the issue: a model on two whole rings,
// one on four half rings, a small pair.
var defaultGangMix = []gangShape{{Pods: 2, Size: 8}, {Pods: 4, Size: 4}, {Pods: 2, Size: 4}}

// parseGangMix reads "2x8,4x4,2x4"; "2x4m3" is a gang of 2 whose
// PodGroup asks for minCount 3.
func parseGangMix(s string) ([]gangShape, error) {
	var out []gangShape
	for _, part := range strings.Split(s, ",") {
		p, k, ok := strings.Cut(strings.TrimSpace(part), "x")
		k, m, hasMin := strings.Cut(k, "m")
		pods, err1 := strconv.Atoi(p)
		size, err2 := strconv.Atoi(k)
		minc, err3 := 0, error(nil)
		if hasMin {
			minc, err3 = strconv.Atoi(m)
		}
		if !ok || err1 != nil || err2 != nil || err3 != nil || pods < 2 || size < 1 || (hasMin && minc < 1) {
			return nil, fmt.Errorf("gang %q: want PODSxSIZE[mMINCOUNT] with at least 2 pods", part)
		}
		out = append(out, gangShape{Pods: pods, Size: size, Min: minc})
	}
	return out, nil
}

// gangWorkload turns a share of the churn's arrivals into gangs drawn from
// mix (seeded, so every arm sees the same jobs): gangs[i] is the shape of
// arrival i, or Pods 0 for a single pod of jobs[i].Size. A gang keeps its
// arrival's time and lifetime.
func gangWorkload(seed uint64, jobs []churn.Job, share float64, mix []gangShape) []gangShape {
	rng := rand.New(rand.NewPCG(seed, 0x67616e67)) // "gang"
	out := make([]gangShape, len(jobs))
	for i := range jobs {
		if share > 0 && rng.Float64() < share {
			out[i] = mix[rng.IntN(len(mix))]
		}
	}
	return out
}

// holdGrace is the gap between two siblings' starts that is not a partial
// hold: the scheduler binds a placed gang's pods one API call each, and
// the harness sees them one event each.
const holdGrace = time.Second

// gangRec is one gang of an arm: its arrival and its pods.
type gangRec struct {
	name    string
	job     int // its arrival in the churn
	shape   gangShape
	created time.Time
	members []string
}

// gangRow is what one gang arm measured.
type gangRow struct {
	Arm, Gate        string
	Side             string // the node side whose contiguity Contiguous is
	Gangs, Whole     int
	PartialHoldLPUs  float64 // LPU-seconds held by started pods of gangs not yet whole
	Deadlocks        int     // gangs not whole at the churn's end
	Short            int     // gangs whose minCount exceeds their pods (gate on: never whole)
	WaitP50, WaitP99 float64 // arrival to the last pod started, whole gangs, seconds
	Contiguous       float64 // share of started multi-LPU pods on a contiguous arc
	Errors           []string
}

// tallyGangs measures gangs from the frozen records at the churn's end
// and the members' bind times (bound: only members started by the end).
// A gang's pods hold their LPUs from their bind until the last sibling's
// (or the end, if one is never bound); holds up to holdGrace are the bind
// round, not partial holds.
func tallyGangs(arm, gate, side string, gangs []gangRec, frozen map[string]podRec, bound map[string]time.Time, end time.Time) gangRow {
	w := gangRow{Arm: arm, Gate: gate, Side: side, Gangs: len(gangs)}
	var waits []float64
	for _, g := range gangs {
		if g.shape.minCount() > g.shape.Pods {
			w.Short++
		}
		last, started, whole := time.Time{}, time.Time{}, true
		for _, m := range g.members {
			at, ok := bound[m]
			if !ok {
				whole = false
				continue
			}
			if at.After(last) {
				last = at
			}
			if s := frozen[m].started; s.After(started) {
				started = s
			}
		}
		until := end
		if whole {
			// The wait is the harness's clock (bind times are to the second).
			until = last
			w.Whole++
			waits = append(waits, started.Sub(g.created).Seconds())
		} else {
			w.Deadlocks++
		}
		for _, m := range g.members {
			at, ok := bound[m]
			if held := until.Sub(at); ok && held > holdGrace {
				w.PartialHoldLPUs += held.Seconds() * float64(frozen[m].size)
			}
		}
	}
	started, contig := 0, 0
	for _, rec := range frozen {
		if rec.size > 1 && !rec.started.IsZero() {
			started++
			if rec.contig[side] {
				contig++
			}
		}
	}
	w.Contiguous = share(contig, started)
	w.WaitP50, w.WaitP99 = percentile(waits, 0.5), percentile(waits, 0.99)
	return w
}

// gangCSVHeader are the columns of results-gang-<nodes>.csv.
var gangCSVHeader = []string{"nodes", "arm", "gate", "gangs", "gangs_whole", "partial_hold_lpu_s", "deadlocks",
	"gang_wait_p50_s", "gang_wait_p99_s", "contiguous_share", "short_gangs"}

// csv is the row as results-gang-<nodes>.csv has it.
func (w gangRow) csv(nodes int) []string {
	return []string{strconv.Itoa(nodes), w.Arm, w.Gate, strconv.Itoa(w.Gangs), strconv.Itoa(w.Whole), f(w.PartialHoldLPUs, 1),
		strconv.Itoa(w.Deadlocks), f(w.WaitP50, 2), f(w.WaitP99, 2), f(w.Contiguous, 4), strconv.Itoa(w.Short)}
}

// gangLoadFactor is how many times more LPUs an arrival asks for on
// average when share of the arrivals are gangs drawn evenly from mix
// instead of single pods of singles.
func gangLoadFactor(share float64, mix []gangShape, singles churn.Mix) float64 {
	gang := 0.0
	for _, g := range mix {
		gang += float64(g.Pods*g.Size) / float64(len(mix))
	}
	return 1 - share + share*gang/singles.Mean()
}

// churnLoad is the load the churn's arrivals are drawn at: -load, or with
// gang arms -load divided by the gangs' load factor, so that the offered
// load, gangs included, is still -load.
func (c config) churnLoad(logf func(string, ...any)) float64 {
	if !c.gangs() {
		return c.Load
	}
	f := gangLoadFactor(c.GangShare, c.GangMix, churn.MixDefault)
	logf("gangs: %.0f %% of arrivals from %v ask %.2f× the LPUs of singles on average; arrivals drawn at load %.3f for an offered load of %.2f",
		100*c.GangShare, c.GangMix, f, c.Load/f, c.Load)
	return c.Load / f
}

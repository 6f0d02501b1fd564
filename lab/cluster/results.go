package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/hyperaccel/lpu-node/internal/atomicfile"
	"github.com/hyperaccel/lpu-node/lab/svgchart"
)

// results are one run's rows.
type results struct {
	Nodes, TwoRing, Pods, Capacity int
	Coalesce                       time.Duration // -coalesce
	Multi                          int           // multi-LPU arrivals
	Bound                          int           // multi-LPU pods the count bound starts
	Rows                           []row
	Priority                       []prioRow // -workload priority
}

// row is one arm under one node side.
type row struct {
	Arm, Side                    string
	Multi, Contiguous, Scattered int
	Refused, Waiting             int
	WaitP50, WaitP99             float64 // seconds, started pods
	Throughput                   float64 // burst, pods/s
	LatP50, LatP99               float64 // scheduling attempt, seconds
	Scheduled                    float64
	APICPUPer1k, SchedCPUPer1k   float64
	APIRSS, SchedRSS             float64
	Slices, SliceBytes, Rewrites int
	Errors                       []string
	ChurnSeconds                 float64
	Gang                         *gangRow // gang arms only

	// The legs' p50s (waitLegs); a p50 each, so they need not add up
	// to WaitP50. Legs are every started multi-LPU pod's.
	WaitClaimP50, WaitBindP50, WaitAdmitP50 float64
	Legs                                    []waitLegs

	// Prefilter arms: the node-label patches the keepers made from the
	// burst to the end of the churn, and how long after the churn's end
	// the labels took to show the view last published (a fall waits
	// nodelabel's LowerAfter). Created pods and those admission gave the
	// prefilter's node affinity (every arm: none without the policy).
	Prefilter             bool
	LabelWrites           int
	LabelSettle           float64 // seconds
	Created, WithAffinity int
	HarnessCPUPer1k       float64 // the harness process (nodes, keepers), per 1k churn pods
	HarnessRSS            float64 // MiB, at the churn's end
}

// profileSpan is how long -profile records the scheduler from the start
// of each burst: within the burst at 1,000 nodes for every arm.
const profileSpan = 15 * time.Second

// runArm runs one arm: the burst, then the churn, and turns the records
// into a row per node side. pf is the prefilter arm's setup, else nil.
func runArm(ctx context.Context, l *lab, spec armSpec, pf *prefilter) ([]row, error) {
	cfg, cs, sc, pids, nodes, logf := l.cfg, l.cs, l.sc, l.st.PIDs, l.nodes, l.logf
	jobs, burstJobs := l.jobs, l.burstJobs
	ctx, cancel := context.WithCancel(ctx)
	r := newRunner(cs, spec, nodes, cfg.Unit, cfg.Seed, logf)
	r.coalesce = cfg.Coalesce
	for _, j := range jobs {
		r.lifetimes = append(r.lifetimes, j.End-j.Arrive)
	}
	gs := attachGangs(r, cfg, jobs)
	if err := r.watch(ctx); err != nil {
		cancel()
		return nil, err
	}
	// The loop is over before this returns: a delayed publication must
	// not land after the next arm reset the slices.
	looped := make(chan struct{})
	go func() { r.loop(ctx); close(looped) }()
	defer func() { cancel(); <-looped }()
	stats0 := sliceStats(nodes)
	if pf != nil {
		settled, err := pf.settle(ctx, 2*time.Minute)
		if err != nil {
			return nil, err
		}
		logf("arm %s: %d nodes labelled as published in %v", spec.name, len(nodes), settled.Round(10*time.Millisecond))
	}
	labels0, err := pf.writes()
	if err != nil {
		return nil, err
	}
	logf("arm %s: burst of %d pods", spec.name, len(burstJobs))
	profiled := make(chan error, 1)
	if cfg.Profile != "" {
		path := filepath.Join(cfg.Profile, spec.name+"-scheduler.pprof")
		go func() { profiled <- sc.profile(ctx, profileSpan, path) }()
	} else {
		profiled <- nil
	}
	tput, err := r.burst(ctx, burstJobs, len(burstJobs), sc)
	if err != nil {
		return nil, err
	}
	if err := <-profiled; err != nil {
		return nil, err
	}
	m0, err := sc.scrape(ctx)
	if err != nil {
		return nil, err
	}
	api0, _ := readProc(pids["kube-apiserver"])
	sch0, _ := readProc(pids["kube-scheduler"])
	own0, _ := readProc(os.Getpid())
	logf("arm %s: burst %.1f pods/s; churn of %d pods", spec.name, tput, len(jobs))
	var settled time.Duration
	r.atEnd = func() {
		if pf != nil {
			settled = r.settleLabels(ctx, pf)
		}
		if cfg.inspect != nil {
			cfg.inspect(spec.name, l.c.Kubeconfig)
		}
	}
	took, err := r.churnPhase(ctx, jobs)
	if err != nil {
		return nil, err
	}
	m1, err := sc.scrape(ctx)
	if err != nil {
		return nil, err
	}
	api1, _ := readProc(pids["kube-apiserver"])
	sch1, _ := readProc(pids["kube-scheduler"])
	own1, _ := readProc(os.Getpid())
	stats1 := sliceStats(nodes)
	labels1, err := pf.writes()
	if err != nil {
		r.errs = append(r.errs, err.Error())
	}
	nSlices, bytes := countSlices(ctx, cs)
	r.wg.Wait()
	gang := gs.result(ctx, logf)

	var rows []row
	for _, side := range spec.sides() {
		w := row{Arm: spec.name, Side: side, Throughput: tput, ChurnSeconds: took.Seconds(),
			LatP50: quantile(m0, m1, 0.5), LatP99: quantile(m0, m1, 0.99), Scheduled: m1.scheduled - m0.scheduled,
			APICPUPer1k:   (api1.CPUSeconds - api0.CPUSeconds) * 1000 / float64(len(jobs)),
			SchedCPUPer1k: (sch1.CPUSeconds - sch0.CPUSeconds) * 1000 / float64(len(jobs)),
			APIRSS:        api1.RSSMiB, SchedRSS: sch1.RSSMiB, Slices: nSlices, SliceBytes: bytes, Rewrites: stats1 - stats0,
			Errors: r.errs, Gang: gang, Prefilter: spec.prefilter, LabelWrites: labels1 - labels0, LabelSettle: settled.Seconds(),
			Created: int(r.created.Load()), WithAffinity: int(r.withAffinity.Load()),
			HarnessCPUPer1k: (own1.CPUSeconds - own0.CPUSeconds) * 1000 / float64(len(jobs)), HarnessRSS: own1.RSSMiB}
		w.tally(r.frozen, side)
		rows = append(rows, w)
		// The row in the log too: a long run stopped before its end
		// still has the arms it finished.
		logf("arm %s (%s): contiguous %d/%d, scattered %d, refused %d, waiting %d, wait p50/p99 %.2f/%.2f s (legs p50 claim/bind/admit %.3f/%.3f/%.3f s), burst %.1f pods/s, sched p50/p99 %.1f/%.1f ms, apiserver/scheduler CPU s per 1k %.1f/%.1f, slices %d (%d B), writes %d, node-label writes %d (settled in %.1f s), pods with the prefilter affinity %d/%d, harness CPU s per 1k %.1f, RSS %.0f MiB, errors %d",
			w.Arm, w.Side, w.Contiguous, w.Multi, w.Scattered, w.Refused, w.Waiting, w.WaitP50, w.WaitP99,
			w.WaitClaimP50, w.WaitBindP50, w.WaitAdmitP50, w.Throughput,
			w.LatP50*1000, w.LatP99*1000, w.APICPUPer1k, w.SchedCPUPer1k, w.Slices, w.SliceBytes, w.Rewrites, w.LabelWrites, w.LabelSettle, w.WithAffinity, w.Created, w.HarnessCPUPer1k, w.HarnessRSS, len(w.Errors))
	}
	logf("arm %s done in %v", spec.name, took.Round(time.Second))
	return rows, nil
}

// waitLegs is a started pod's wait, in seconds, split where it changed
// hands: Claim from its creation until its status named its claim (DRA;
// 0 for a count pod, which has none), Bind until the harness saw it bound
// to a node (the scheduler's allocation and bind), Admit until the
// harness started it (the node side: DRA's claim read, the device
// plugin's pick). They add up to Total, the wait.
type waitLegs struct{ Claim, Bind, Admit, Total float64 }

// legsOf splits rec's wait (rec started). A mark not seen, or out of
// order, is moved to the previous one (or, past the start, to the
// start), so that every leg is ≥ 0 and the legs add up to the wait.
func legsOf(rec podRec) waitLegs {
	at := func(t, lo, hi time.Time) time.Time {
		if t.IsZero() || t.Before(lo) {
			return lo
		}
		if t.After(hi) {
			return hi
		}
		return t
	}
	claimed := at(rec.claimedAt, rec.created, rec.started)
	bound := at(rec.boundAt, claimed, rec.started)
	return waitLegs{Claim: claimed.Sub(rec.created).Seconds(), Bind: bound.Sub(claimed).Seconds(),
		Admit: rec.started.Sub(bound).Seconds(), Total: rec.started.Sub(rec.created).Seconds()}
}

// tally counts the multi-LPU pods of frozen by what side gave them
// (refused, waiting, contiguous, scattered) and their waits, whole and
// by leg.
func (w *row) tally(frozen map[string]podRec, side string) {
	var waits, claims, binds, admits []float64
	for _, rec := range frozen {
		if rec.size == 1 {
			continue
		}
		w.Multi++
		switch {
		case rec.refused:
			w.Refused++
		case rec.started.IsZero():
			w.Waiting++
		case rec.contig[side]:
			w.Contiguous++
		default:
			w.Scattered++
		}
		if !rec.started.IsZero() {
			l := legsOf(rec)
			w.Legs = append(w.Legs, l)
			waits, claims, binds, admits = append(waits, l.Total), append(claims, l.Claim), append(binds, l.Bind), append(admits, l.Admit)
		}
	}
	w.WaitP50, w.WaitP99 = percentile(waits, 0.5), percentile(waits, 0.99)
	w.WaitClaimP50, w.WaitBindP50, w.WaitAdmitP50 = percentile(claims, 0.5), percentile(binds, 0.5), percentile(admits, 0.5)
}

func sliceStats(nodes []*simNode) int {
	t := 0
	for _, n := range nodes {
		if n.ctrl != nil {
			s := n.ctrl.GetStats()
			t += int(s.NumCreates + s.NumUpdates + s.NumDeletes)
		}
	}
	return t
}

func countSlices(ctx context.Context, cs kubernetes.Interface) (int, int) {
	l, err := cs.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, 0
	}
	total := 0
	for i := range l.Items {
		b, _ := json.Marshal(&l.Items[i])
		total += len(b)
	}
	return len(l.Items), total
}

func percentile(v []float64, q float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Clone(v)
	sort.Float64s(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(i, 0)]
}

// name is the row's label: the arm, and for the device plugin its node side.
func (w row) name() string {
	if w.Side == "dra" {
		return w.Arm
	}
	return w.Arm + "+" + w.Side
}

func share(a, b int) float64 {
	if b == 0 {
		return math.NaN()
	}
	return float64(a) / float64(b)
}

var csvHeader = []string{"nodes", "two_ring_nodes", "arm", "node_side", "multi_arrivals", "contiguous", "contiguous_share", "share_of_bound",
	"scattered", "refused", "waiting_at_end", "wait_p50_s", "wait_p99_s", "burst_pods_per_s", "sched_latency_p50_ms", "sched_latency_p99_ms",
	"apiserver_cpu_s_per_1k_pods", "scheduler_cpu_s_per_1k_pods", "apiserver_rss_mib", "scheduler_rss_mib",
	"resourceslices", "resourceslice_bytes", "resourceslice_writes", "harness_errors",
	// Added after the others, so that an older CSV is a prefix of this.
	"wait_claim_p50_s", "wait_bind_p50_s", "wait_admit_p50_s",
	"node_label_writes", "node_label_settle_s", "pods_created", "pods_with_prefilter_affinity", "harness_cpu_s_per_1k_pods", "harness_rss_mib", "coalesce_ms"}

func f(x float64, p int) string {
	if math.IsNaN(x) {
		return ""
	}
	return strconv.FormatFloat(x, 'f', p, 64)
}

func (res *results) csvRows() [][]string {
	var out [][]string
	for _, w := range res.Rows {
		out = append(out, []string{strconv.Itoa(res.Nodes), strconv.Itoa(res.TwoRing), w.Arm, w.Side, strconv.Itoa(w.Multi),
			strconv.Itoa(w.Contiguous), f(share(w.Contiguous, w.Multi), 4), f(share(w.Contiguous, res.Bound), 4),
			strconv.Itoa(w.Scattered), strconv.Itoa(w.Refused), strconv.Itoa(w.Waiting), f(w.WaitP50, 2), f(w.WaitP99, 2),
			f(w.Throughput, 1), f(w.LatP50*1000, 2), f(w.LatP99*1000, 2), f(w.APICPUPer1k, 1), f(w.SchedCPUPer1k, 1),
			f(w.APIRSS, 0), f(w.SchedRSS, 0), strconv.Itoa(w.Slices), strconv.Itoa(w.SliceBytes), strconv.Itoa(w.Rewrites),
			strconv.Itoa(len(w.Errors)), f(w.WaitClaimP50, 3), f(w.WaitBindP50, 3), f(w.WaitAdmitP50, 3),
			w.labelCell(strconv.Itoa(w.LabelWrites)), w.labelCell(f(w.LabelSettle, 2)), strconv.Itoa(w.Created), strconv.Itoa(w.WithAffinity),
			f(w.HarnessCPUPer1k, 1), f(w.HarnessRSS, 0), strconv.FormatInt(res.Coalesce.Milliseconds(), 10)})
	}
	return out
}

// labelCell is s in a prefilter arm, empty in the others (no labels kept).
func (w row) labelCell(s string) string {
	if !w.Prefilter {
		return ""
	}
	return s
}

// writeResults writes results-N.csv (appending to nothing: one file per
// node count) and cluster-N.svg.
func writeResults(cfg config, res *results) error {
	suffix := res.suffix()
	gangOnly, err := writeGangResults(cfg, res, suffix)
	if err != nil || gangOnly {
		return err
	}
	fcsv, err := os.Create(outPath(cfg, "results-"+suffix+".csv"))
	if err != nil {
		return err
	}
	w := csv.NewWriter(fcsv)
	_ = w.Write(csvHeader)
	_ = w.WriteAll(res.csvRows())
	if err := fcsv.Close(); err != nil {
		return err
	}
	return writeRunChart(cfg, res)
}

// suffix names a run's files: the node count, "-mixed" with two-ring nodes.
func (res *results) suffix() string {
	if res.TwoRing > 0 {
		return strconv.Itoa(res.Nodes) + "-mixed"
	}
	return strconv.Itoa(res.Nodes)
}

// writeRunChart writes cluster-<suffix>.svg whole or not at all.
func writeRunChart(cfg config, res *results) error {
	path := outPath(cfg, "cluster-"+res.suffix()+".svg")
	var buf bytes.Buffer
	if err := chart(&buf, cfg, res); err != nil {
		return fmt.Errorf("draw %s: %w", path, err)
	}
	return atomicfile.Write(path, buf.Bytes(), atomicfile.WithMode(0o644), atomicfile.WithoutSync())
}

// table is the run as a markdown table.
func table(cfg config, res *results) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\nN=%d nodes (%d two-ring), %d LPUs, %d arrivals (%d multi-LPU), seed %d, load %.2f, unit %v, coalesce %v; count bound starts %d multi-LPU pods\n",
		res.Nodes, res.TwoRing, res.Capacity, res.Pods, res.Multi, cfg.Seed, cfg.Load, cfg.Unit, res.Coalesce, res.Bound)
	if cfg.Scheduler != "" {
		fmt.Fprintf(&b, "kube-scheduler: %s\n", cfg.Scheduler)
	}
	if cfg.ProtoScheduler != "" {
		fmt.Fprintf(&b, "arms ending in %s: kube-scheduler %s\n", suffixProto, cfg.ProtoScheduler)
	}
	b.WriteString("\n")
	b.WriteString("| arm | contiguous / multi | of bound | scattered | refused | waiting at end | wait p50/p99 s | wait legs p50 claim / bind / admit s | burst pods/s | sched p50/p99 ms | apiserver / scheduler CPU s per 1k pods | RSS MiB | slices (KiB) | slice writes | node-label writes |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, w := range res.Rows {
		fmt.Fprintf(&b, "| %s | %d/%d = %s %% | %s %% | %d | %d | %d | %s / %s | %s / %s / %s | %s | %s / %s | %s / %s | %s / %s | %d (%d) | %d | %s |\n",
			w.name(), w.Contiguous, w.Multi, f(100*share(w.Contiguous, w.Multi), 1), f(100*share(w.Contiguous, res.Bound), 1),
			w.Scattered, w.Refused, w.Waiting, f(w.WaitP50, 2), f(w.WaitP99, 2),
			f(w.WaitClaimP50, 3), f(w.WaitBindP50, 3), f(w.WaitAdmitP50, 3), f(w.Throughput, 1),
			f(w.LatP50*1000, 1), f(w.LatP99*1000, 1), f(w.APICPUPer1k, 1), f(w.SchedCPUPer1k, 1), f(w.APIRSS, 0), f(w.SchedRSS, 0),
			w.Slices, w.SliceBytes/1024, w.Rewrites, cmp.Or(w.labelCell(strconv.Itoa(w.LabelWrites)), "-"))
	}
	for _, w := range res.Rows {
		for _, e := range w.Errors[:min(len(w.Errors), 5)] {
			fmt.Fprintf(&b, "\nharness error in %s: %s", w.name(), e)
		}
	}
	b.WriteString("\n")
	b.WriteString(gangTable(res))
	return b.String()
}

// chart draws contiguous starts per multi-LPU arrival, one bar per row,
// with the count bound as the first bar.
func chart(w io.Writer, cfg config, res *results) error {
	bars := []bar{{"bound", 100 * share(res.Bound, res.Multi), "#969696"}}
	for _, r := range res.Rows {
		col := "#2166ac" // DRA
		if r.Side == "kubelet-default" {
			col = "#d6604d"
		} else if r.Side != "dra" {
			col = "#f4a53c"
		}
		bars = append(bars, bar{strings.ReplaceAll(r.name(), "kubelet-default", "kubelet"), 100 * share(r.Contiguous, r.Multi), col})
	}
	return percentChart(w, "Contiguous starts per multi-LPU arrival (%)",
		fmt.Sprintf("%d nodes, %d arrivals, seed %d, load %.2f, real kube-scheduler 1.37.2", res.Nodes, res.Pods, cfg.Seed, cfg.Load), bars)
}

// bar is one bar of percentChart: a value in percent; the label is
// broken into lines under the bar at each "+".
type bar struct {
	label string
	v     float64
	col   string // an SVG colour
}

// percentChart draws bars on a 0..100 axis under a title and a subtitle
// as SVG.
func percentChart(w io.Writer, title, sub string, bars []bar) error {
	p := svgchart.Panel{Lo: 0, Hi: 100, Tick: 25, Digits: 1}
	for _, b := range bars {
		p.Groups = append(p.Groups, svgchart.Group{
			Label: strings.ReplaceAll(b.label, "+", "\n"),
			Bars:  []svgchart.Bar{{Name: strings.ReplaceAll(b.label, "+", ", "), Value: b.v, Color: b.col}},
		})
	}
	return svgchart.Chart{Title: title, Subtitle: sub, Panels: []svgchart.Panel{p}}.Write(w)
}

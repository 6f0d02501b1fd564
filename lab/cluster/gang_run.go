package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hyperaccel/lpu-node/internal/atomicfile"
	"github.com/hyperaccel/lpu-node/lab/churn"
)

// gangArms run the churn with a share of its arrivals turned into gangs,
// on DRA with dynamic slices and the chart's strict templates, and on the
// device plugin (count placement; contiguity as pkg/alloc picks, nothing
// refused, so that a gang is never broken by admission): "on" makes each
// gang a PodGroup (GenericWorkload on, gang minCount = its pods); "off"
// creates the same pods without a group, which is what a cluster without
// the gate makes of them (the apiserver drops spec.schedulingGroup).
var gangArms = []armSpec{
	{name: "gang-on", dra: true, dynamic: true, profile: profileDefault, gang: "on"},
	{name: "gang-off", dra: true, dynamic: true, profile: profileDefault, gang: "off"},
	{name: "gang-dp-on", profile: profileDefault, gang: "on"},
	{name: "gang-dp-off", profile: profileDefault, gang: "off"},
}

// gangState plays an arm's gangs on its runner: it creates them, and a
// gang's pods depart together one lifetime after the last one started
// (a distributed job runs only once all its pods do; until then the
// started ones hold their LPUs and wait).
type gangState struct {
	r      *runner
	shapes []gangShape // by job: Pods 0 is a single pod

	mu      sync.Mutex // guards the fields below (creators and the loop)
	gangs   []gangRec
	ofPod   map[string]int       // member → index in gangs
	started map[int]int          // gang → members started
	boundAt map[string]time.Time // member → when it was bound
}

func newGangState(r *runner, shapes []gangShape) *gangState {
	return &gangState{r: r, shapes: shapes, ofPod: map[string]int{}, started: map[int]int{}, boundAt: map[string]time.Time{}}
}

// create is the runner's createJob: the churn's single pod, or a gang.
func (g *gangState) create(ctx context.Context, job, size int, burst bool) error {
	sh := g.shapes[job]
	if burst || sh.Pods == 0 {
		return g.r.create(ctx, job, size, burst)
	}
	name := g.r.podName(job, false)
	rec := gangRec{name: name, job: job, shape: sh, created: time.Now()}
	for m := 0; m < sh.Pods; m++ {
		rec.members = append(rec.members, name+"-"+strconv.Itoa(m))
	}
	g.mu.Lock()
	for _, m := range rec.members {
		g.ofPod[m] = len(g.gangs)
	}
	g.gangs = append(g.gangs, rec)
	g.mu.Unlock()
	labels := map[string]string{"arm": g.r.spec.name, "gang": name}
	if g.r.spec.gang == "on" {
		pg := &schedv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: labels},
			Spec: schedv1beta1.PodGroupSpec{SchedulingPolicy: schedv1beta1.PodGroupSchedulingPolicy{
				Gang: &schedv1beta1.GangSchedulingPolicy{MinCount: int32(sh.minCount())}}}}
		if _, err := g.r.cs.SchedulingV1beta1().PodGroups(namespace).Create(ctx, pg, metav1.CreateOptions{}); err != nil {
			return refused("PodGroup "+name, pg, err)
		}
	}
	for _, m := range rec.members {
		g.r.mu.Lock()
		g.r.pods[m] = &podRec{job: job, size: sh.Size, created: rec.created}
		g.r.mu.Unlock()
		p := g.r.spec.pod(m, sh.Size)
		p.Labels["gang"] = name
		if g.r.spec.gang == "on" {
			p.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: &name}
		}
		if err := g.r.createPod(ctx, p); err != nil {
			return err
		}
	}
	return nil
}

// onStart is the runner's hook for a started pod: a gang member is
// recorded with its bind time, and once the gang's last member started
// every member departs one lifetime later.
func (g *gangState) onStart(ctx context.Context, p *corev1.Pod) bool {
	g.mu.Lock()
	i, ok := g.ofPod[p.Name]
	if !ok {
		g.mu.Unlock()
		return false
	}
	g.boundAt[p.Name] = bindTime(p)
	g.started[i]++
	rec := g.gangs[i]
	done := g.started[i] == len(rec.members)
	g.mu.Unlock()
	if !done {
		return true
	}
	life := time.Duration(float64(g.r.unit) * g.r.lifetimes[rec.job])
	for _, m := range rec.members {
		time.AfterFunc(life, func() {
			select {
			case g.r.events <- event{kind: "depart", name: m}:
			case <-ctx.Done():
			}
		})
	}
	return true
}

// bindTime is when the scheduler bound the pod (its PodScheduled
// condition, to the second), else now: the harness sees a gang's pods
// one event after another, which is not the cluster's doing.
func bindTime(p *corev1.Pod) time.Time {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionTrue && !c.LastTransitionTime.IsZero() {
			return c.LastTransitionTime.Time
		}
	}
	return time.Now()
}

// row measures the arm's gangs at the churn's end and deletes its
// PodGroups.
func (g *gangState) row(ctx context.Context) gangRow {
	g.mu.Lock()
	bound := map[string]time.Time{}
	for m, t := range g.boundAt {
		if rec, ok := g.r.frozen[m]; ok && !rec.started.IsZero() {
			bound[m] = t
		}
	}
	gangs := append([]gangRec(nil), g.gangs...)
	g.mu.Unlock()
	w := tallyGangs(g.r.spec.name, g.r.spec.gang, g.r.spec.sides()[0], gangs, g.r.frozen, bound, g.r.frozenAt)
	if g.r.spec.gang == "on" {
		err := g.r.cs.SchedulingV1beta1().PodGroups(namespace).DeleteCollection(ctx, metav1.DeleteOptions{},
			metav1.ListOptions{LabelSelector: "arm=" + g.r.spec.name})
		if err != nil && ctx.Err() == nil {
			w.Errors = append(w.Errors, "delete podgroups: "+err.Error())
		}
	}
	return w
}

// workloadRuntimeConfig serves scheduling.k8s.io/v1beta1 (beta: off by
// default) when the Workload API is on.
func workloadRuntimeConfig(on bool) []string {
	if !on {
		return nil
	}
	return []string{"--runtime-config=scheduling.k8s.io/v1beta1=true"}
}

// gangs says whether cfg runs a gang arm (the control plane then has the
// Workload API on).
func (c config) gangs() bool {
	for _, a := range c.Arms {
		if a.gang != "" {
			return true
		}
	}
	return false
}

// attachGangs makes r a gang arm's runner when its spec is one: the
// churn's arrivals, a share of them gangs; nil otherwise.
func attachGangs(r *runner, cfg config, jobs []churn.Job) *gangState {
	if r.spec.gang == "" {
		return nil
	}
	g := newGangState(r, gangWorkload(cfg.Seed, jobs, cfg.GangShare, cfg.GangMix))
	r.createJob, r.onStart = g.create, g.onStart
	return g
}

// result is the gang row of the arm (nil for other arms), logged.
func (g *gangState) result(ctx context.Context, logf func(string, ...any)) *gangRow {
	if g == nil {
		return nil
	}
	w := g.row(ctx)
	logf("arm %s (gate %s): gangs %d, whole %d, partial holds %.1f LPU-s, deadlocks %d, gang wait p50/p99 %.2f/%.2f s, contiguous %.3f",
		w.Arm, w.Gate, w.Gangs, w.Whole, w.PartialHoldLPUs, w.Deadlocks, w.WaitP50, w.WaitP99, w.Contiguous)
	return &w
}

// writeGangResults writes results-gang-<suffix>.csv, a row per gang arm,
// when the run had any; gangOnly says it had nothing else (then the
// other results files are left as they are).
func writeGangResults(cfg config, res *results, suffix string) (gangOnly bool, err error) {
	var rows [][]string
	gangRows := 0
	for _, w := range res.Rows {
		if w.Gang != nil {
			gangRows++
			if w.Side == w.Gang.Side { // one line per arm, not per node side
				rows = append(rows, w.Gang.csv(res.Nodes))
			}
		}
	}
	if len(rows) == 0 {
		return false, nil
	}
	path := outPath(cfg, "results-gang-"+suffix+".csv")
	fh, err := os.Create(path)
	if err != nil {
		return false, fmt.Errorf("create %s: %w", path, err)
	}
	w := csv.NewWriter(fh)
	_ = w.Write(gangCSVHeader)
	_ = w.WriteAll(rows)
	if err := fh.Close(); err != nil {
		return false, fmt.Errorf("write %s: %w", path, err)
	}
	if err := writeGangChart(cfg, res, suffix); err != nil {
		return false, err
	}
	return gangRows == len(res.Rows), nil
}

// replot draws cfg.Replot, a results-N.csv or results-gang-N.csv of an
// earlier run, as its chart in cfg.Out and starts nothing: for runs made
// before the harness drew the chart, or drew it as it does now.
func replot(cfg config) error {
	fh, err := os.Open(cfg.Replot)
	if err != nil {
		return fmt.Errorf("replot: %w", err)
	}
	defer fh.Close()
	recs, err := csv.NewReader(fh).ReadAll()
	if err != nil {
		return fmt.Errorf("read %s: %w", cfg.Replot, err)
	}
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", cfg.Out, err)
	}
	// The first 8 columns of results-N.csv are what its chart needs.
	if len(recs) >= 2 && len(recs[0]) >= 8 && len(recs[0]) <= len(csvHeader) &&
		strings.Join(recs[0], ",") == strings.Join(csvHeader[:len(recs[0])], ",") {
		return replotRun(cfg, recs)
	}
	return replotGang(cfg, recs)
}

// replotRun draws a results-N.csv's rows as cluster-N.svg. The count
// bound is not a column: it is contiguous / share_of_bound of a row.
func replotRun(cfg config, recs [][]string) error {
	res := &results{Pods: cfg.Pods}
	for i, rec := range recs[1:] {
		var nums [4]float64 // nodes, two_ring_nodes, multi_arrivals, contiguous
		for j, col := range []int{0, 1, 4, 5} {
			var err error
			if nums[j], err = strconv.ParseFloat(rec[col], 64); err != nil {
				return fmt.Errorf("read %s: row %d, %s: %w", cfg.Replot, i+1, csvHeader[col], err)
			}
		}
		res.Nodes, res.TwoRing, res.Multi = int(nums[0]), int(nums[1]), int(nums[2])
		if ofBound, err := strconv.ParseFloat(rec[7], 64); err == nil && ofBound > 0 && res.Bound == 0 {
			res.Bound = int(math.Round(nums[3] / ofBound))
		}
		res.Rows = append(res.Rows, row{Arm: rec[2], Side: rec[3], Multi: int(nums[2]), Contiguous: int(nums[3])})
	}
	return writeRunChart(cfg, res)
}

// replotGang draws a results-gang-N.csv's rows as cluster-gang-N.svg.
func replotGang(cfg config, recs [][]string) error {
	// Older runs lack the trailing columns (short_gangs); the first 7 are needed.
	if len(recs) < 2 || len(recs[0]) < 7 || len(recs[0]) > len(gangCSVHeader) ||
		strings.Join(recs[0], ",") != strings.Join(gangCSVHeader[:len(recs[0])], ",") {
		return fmt.Errorf("read %s: not a results or results-gang CSV with rows (want the header %s or %s)",
			cfg.Replot, strings.Join(csvHeader, ","), strings.Join(gangCSVHeader, ","))
	}
	res := &results{Pods: cfg.Pods}
	for i, rec := range recs[1:] {
		var nums [5]float64
		for j, col := range []int{0, 3, 4, 5, 6} {
			var err error
			if nums[j], err = strconv.ParseFloat(rec[col], 64); err != nil {
				return fmt.Errorf("read %s: row %d, %s: %w", cfg.Replot, i+1, gangCSVHeader[col], err)
			}
		}
		res.Nodes = int(nums[0])
		g := &gangRow{Arm: rec[1], Gate: rec[2], Gangs: int(nums[1]), Whole: int(nums[2]), PartialHoldLPUs: nums[3], Deadlocks: int(nums[4])}
		res.Rows = append(res.Rows, row{Arm: g.Arm, Gang: g})
	}
	return writeGangChart(cfg, res, strconv.Itoa(res.Nodes))
}

// writeGangChart writes cluster-gang-<suffix>.svg whole or not at all.
func writeGangChart(cfg config, res *results, suffix string) error {
	path := outPath(cfg, "cluster-gang-"+suffix+".svg")
	var buf bytes.Buffer
	if err := gangChart(&buf, cfg, res); err != nil {
		return fmt.Errorf("draw %s: %w", path, err)
	}
	return atomicfile.Write(path, buf.Bytes(), atomicfile.WithMode(0o644), atomicfile.WithoutSync())
}

// gangChart draws the share of gangs started whole per gang arm, the
// deadlocks and partial holds under each bar; gate on blue, off red.
func gangChart(w io.Writer, cfg config, res *results) error {
	var bars []bar
	for _, r := range res.Rows {
		g := r.Gang
		if g == nil || r.Side != g.Side {
			continue
		}
		col := "#2166ac"
		if g.Gate == "off" {
			col = "#d6604d"
		}
		bars = append(bars, bar{fmt.Sprintf("%s+gate %s+%d deadlocks+%.0f LPU-s held partial", g.Arm, g.Gate, g.Deadlocks, g.PartialHoldLPUs),
			100 * share(g.Whole, g.Gangs), col})
	}
	return percentChart(w, "Gangs started whole (%)",
		fmt.Sprintf("%d nodes, %d arrivals, gang share %.2f, seed %d, load %.2f, real kube-scheduler 1.37.2", res.Nodes, res.Pods, cfg.GangShare, cfg.Seed, cfg.Load), bars)
}

// gangTable is the gang arms' rows as a markdown table ("" without any).
func gangTable(res *results) string {
	var b strings.Builder
	for _, w := range res.Rows {
		g := w.Gang
		if g == nil || w.Side != g.Side {
			continue
		}
		if b.Len() == 0 {
			b.WriteString("| arm | gate | gangs | whole | partial holds LPU-s | deadlocks | gang wait p50/p99 s | contiguous |\n|---|---|---|---|---|---|---|---|\n")
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %.1f | %d | %.2f / %.2f | %.1f %% |\n", g.Arm, g.Gate, g.Gangs, g.Whole,
			g.PartialHoldLPUs, g.Deadlocks, g.WaitP50, g.WaitP99, 100*g.Contiguous)
	}
	if b.Len() > 0 {
		b.WriteString("\n")
	}
	return b.String()
}

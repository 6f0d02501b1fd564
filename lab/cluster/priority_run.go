package main

import (
	"context"
	"encoding/csv"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Workloads (-workload).
const (
	workloadChurn    = "churn"
	workloadPriority = "priority"
)

// priorityArms run when -workload priority is given without -arms: the
// device plugin, best effort and strict, and DRA.
const priorityArms = "dp-least,dp-least-strict,dra-dynamic"

// fillQuiet is how long a fill wave may go without a pod starting before
// the pods still waiting are given up (deleted): 1- and 2-LPU pods on
// nearly full nodes may not all fit.
const fillQuiet = 5 * time.Second

// prioRun is one arm of the priority workload.
type prioRun struct {
	r     *runner
	l     *lab
	side  string // the node side whose LPUs count: pkg/alloc or dra
	rng   *rand.Rand
	low   map[string]bool // low-priority pod names (the harness goroutine's)
	nLow  int
	total int // LPUs in the cluster
}

// runPriority runs the priority workload in one arm: fill, then the
// high-priority pods one at a time, then every pod goes.
func (l *lab) runPriority(ctx context.Context, spec armSpec) (prioRow, error) {
	if err := ensurePriorityClasses(ctx, l.cs); err != nil {
		return prioRow{}, err
	}
	ctx, cancel := context.WithCancel(ctx)
	r := newRunner(l.cs, spec, l.nodes, l.cfg.Unit, l.cfg.Seed, l.logf)
	r.coalesce = l.cfg.Coalesce
	r.evicting = true
	// Pods live until evicted or the arm's end.
	r.onStart = func(context.Context, *corev1.Pod) bool { return true }
	if err := r.watch(ctx); err != nil {
		cancel()
		return prioRow{}, err
	}
	looped := make(chan struct{})
	go func() { r.loop(ctx); close(looped) }()
	defer func() { cancel(); <-looped }()
	p := &prioRun{r: r, l: l, side: "pkg/alloc", rng: rand.New(rand.NewPCG(l.cfg.Seed, 0x7072696f)), low: map[string]bool{}}
	if spec.dra {
		p.side = "dra"
	}
	for _, n := range l.nodes {
		p.total += len(n.inv.Devices)
	}
	if err := p.fill(ctx); err != nil {
		return prioRow{}, err
	}
	lowPods, lowLPUs := p.running()
	l.logf("arm %s: %d low-priority pods hold %d of %d LPUs; %d high-priority pods, %v each", spec.name, lowPods, lowLPUs, p.total, l.cfg.High, l.cfg.HighWait)
	outs, msg, err := p.submitHigh(ctx)
	if err != nil {
		return prioRow{}, err
	}
	w := tallyPriority(spec.name, outs)
	w.LowPods, w.Budget, w.Message = lowPods, l.cfg.HighWait.Seconds(), msg
	r.mu.Lock()
	var names []string
	for name, rec := range r.pods {
		if !rec.gone {
			names = append(names, name)
		}
	}
	r.mu.Unlock()
	for _, name := range names {
		r.events <- event{kind: "depart", name: name}
	}
	err = r.drain(ctx)
	r.wg.Wait()
	w.Errors = r.errs
	l.logf("arm %s: high started %d/%d (contiguous %d, refused %d), wait p50/p99 %s / %s, preemptions %d, victims %d (fewest %d), freed nothing %d, errors %d",
		w.Arm, w.Started, w.High, w.Contiguous, w.Refused, waitCell(w.WaitP50, w.Budget), waitCell(w.WaitP99, w.Budget),
		w.Preemptions, w.Victims, w.Fewest, w.FreedNothing, len(w.Errors))
	return w, err
}

// ensurePriorityClasses creates the workload's two PriorityClasses once.
func ensurePriorityClasses(ctx context.Context, cs kubernetes.Interface) error {
	for name, v := range map[string]int32{classLow: classLowValue, classHigh: classHighValue} {
		pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: v,
			Description: "lab/cluster priority workload"}
		if _, err := cs.SchedulingV1().PriorityClasses().Create(ctx, pc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return refused("priorityclass "+name, pc, err)
		}
	}
	return nil
}

// create makes a pod of size LPUs in class, recording it first.
func (p *prioRun) create(ctx context.Context, name string, size int, class string) error {
	p.r.mu.Lock()
	p.r.pods[name] = &podRec{size: size, created: time.Now()}
	p.r.mu.Unlock()
	pod := p.r.spec.pod(name, size)
	pod.Spec.PriorityClassName = class
	pod.Labels["priority"] = class
	return p.r.createPod(ctx, pod)
}

// running counts the pods running and the LPUs they hold.
func (p *prioRun) running() (pods, lpus int) {
	p.r.mu.Lock()
	defer p.r.mu.Unlock()
	for _, rec := range p.r.pods {
		if !rec.started.IsZero() && !rec.gone && !rec.refused {
			pods++
			lpus += rec.size
		}
	}
	return pods, lpus
}

// fill brings the cluster to full with low-priority pods: a wave of 1-
// and 2-LPU pods, then a third of them end and a second wave refills (so
// that a pod's age no longer follows its ring position, as after churn),
// then 1-LPU pods take what is left.
func (p *prioRun) fill(ctx context.Context) error {
	if err := p.wave(ctx, false); err != nil {
		return err
	}
	var live []string
	p.r.mu.Lock()
	for name, rec := range p.r.pods {
		if !rec.started.IsZero() && !rec.gone && !rec.refused {
			live = append(live, name)
		}
	}
	p.r.mu.Unlock()
	slices.Sort(live)
	p.rng.Shuffle(len(live), func(i, j int) { live[i], live[j] = live[j], live[i] })
	for _, name := range live[:len(live)/3] {
		p.r.events <- event{kind: "depart", name: name}
	}
	if err := p.waitGone(ctx, live[:len(live)/3]); err != nil {
		return err
	}
	if err := p.wave(ctx, false); err != nil {
		return err
	}
	if err := p.wave(ctx, true); err != nil {
		return err
	}
	if _, lpus := p.running(); lpus < p.total {
		p.l.logf("arm %s: filled %d of %d LPUs only", p.r.spec.name, lpus, p.total)
	}
	return nil
}

// wave creates low-priority pods for the free LPUs (1 or 2 LPUs each,
// seeded; only 1 with ones) and waits for them to start; those still
// waiting after fillQuiet without a start are deleted.
func (p *prioRun) wave(ctx context.Context, ones bool) error {
	_, held := p.running()
	var names []string
	var sizes []int
	for free := p.total - held; free > 0; {
		size := 1
		if !ones && free > 1 && p.rng.IntN(2) == 1 {
			size = 2
		}
		free -= size
		name := fmt.Sprintf("%s-l%d", p.r.spec.name, p.nLow)
		p.nLow++
		p.low[name] = true
		names, sizes = append(names, name), append(sizes, size)
	}
	if err := parallel(ctx, len(names), 8, func(i int) error { return p.create(ctx, names[i], sizes[i], classLow) }); err != nil {
		return err
	}
	return p.settle(ctx, names)
}

// settle waits until every pod of names started or was refused, or none
// started for fillQuiet; it then deletes the ones still waiting.
func (p *prioRun) settle(ctx context.Context, names []string) error {
	last, since := -1, time.Now()
	for {
		var waiting []string
		p.r.mu.Lock()
		for _, name := range names {
			if rec := p.r.pods[name]; rec.started.IsZero() && !rec.refused && !rec.gone {
				waiting = append(waiting, name)
			}
		}
		p.r.mu.Unlock()
		if len(waiting) == 0 {
			return nil
		}
		if len(waiting) != last {
			last, since = len(waiting), time.Now()
		}
		if time.Since(since) > fillQuiet {
			for _, name := range waiting {
				p.r.events <- event{kind: "depart", name: name}
			}
			return p.waitGone(ctx, waiting)
		}
		if err := sleepCtx(ctx, 250*time.Millisecond); err != nil {
			return err
		}
	}
}

// waitGone waits until the API server has none of the pods.
func (p *prioRun) waitGone(ctx context.Context, names []string) error {
	deadline := time.Now().Add(time.Minute)
	for _, name := range names {
		for {
			_, err := p.r.cs.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("pod %s still there a minute after its delete (%v)", name, err)
			}
			if err := sleepCtx(ctx, 200*time.Millisecond); err != nil {
				return err
			}
		}
	}
	return nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// submitHigh submits -high high-priority pods, 4 and 8 LPUs in turn, one
// at a time: each gets -high-wait to start (or be refused), and one that
// did not is deleted before the next. The victims of each are the pods
// evicted from its creation until a second after it was settled. It also
// returns the scheduler's last condition message on a pod that never
// started.
func (p *prioRun) submitHigh(ctx context.Context) ([]highOutcome, string, error) {
	var outs []highOutcome
	var msg string
	for i := 0; i < p.l.cfg.High; i++ {
		size := 4
		if i%2 == 1 {
			size = 8
		}
		fewest, err := p.fewest(ctx, size)
		if err != nil {
			return nil, "", err
		}
		name := fmt.Sprintf("%s-h%d", p.r.spec.name, i)
		from := time.Now()
		if err := p.create(ctx, name, size, classHigh); err != nil {
			return nil, "", err
		}
		rec, err := p.await(ctx, name)
		if err != nil {
			return nil, "", err
		}
		o := highOutcome{name: name, size: size, wait: math.Inf(1), node: rec.node, contig: rec.contig[p.side], refused: rec.refused, fewest: fewest}
		if !rec.started.IsZero() {
			o.wait = rec.started.Sub(rec.created).Seconds()
		}
		if rec.started.IsZero() && !rec.refused {
			if m := p.schedulerMessage(ctx, name); m != "" {
				msg = m
			}
			p.r.events <- event{kind: "depart", name: name}
			if err := p.waitGone(ctx, []string{name}); err != nil {
				return nil, "", err
			}
		}
		if err := sleepCtx(ctx, time.Second); err != nil {
			return nil, "", err
		}
		o.victims = p.victimsSince(from)
		p.l.logf("arm %s: %s (%d LPUs): started %v on %s contiguous %v refused %v after %.2f s, victims %v (fewest %d)",
			p.r.spec.name, name, size, !rec.started.IsZero(), rec.node, o.contig, rec.refused, o.wait, o.victims, fewest)
		outs = append(outs, o)
	}
	return outs, msg, nil
}

// await waits until the pod started or was refused, or -high-wait
// passed, and returns its record then.
func (p *prioRun) await(ctx context.Context, name string) (podRec, error) {
	deadline := time.Now().Add(p.l.cfg.HighWait)
	for {
		p.r.mu.Lock()
		rec := *p.r.pods[name]
		p.r.mu.Unlock()
		if !rec.started.IsZero() || rec.refused || time.Now().After(deadline) {
			return rec, nil
		}
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			return rec, err
		}
	}
}

// victimsSince counts the evictions since from, by node.
func (p *prioRun) victimsSince(from time.Time) map[string]int {
	p.r.mu.Lock()
	defer p.r.mu.Unlock()
	out := map[string]int{}
	for _, e := range p.r.evictions {
		if !e.at.Before(from) {
			out[e.node]++
		}
	}
	return out
}

// fewest is the fewest low-priority pods any node must lose for a free
// arc of size, from the LPUs each running pod holds now (the loop
// paused).
func (p *prioRun) fewest(ctx context.Context, size int) (int, error) {
	best := -1
	err := p.r.paused(ctx, func() {
		owners := map[string]map[string]string{}
		p.r.mu.Lock()
		for name, rec := range p.r.pods {
			if rec.started.IsZero() || rec.gone || rec.refused {
				continue
			}
			if owners[rec.node] == nil {
				owners[rec.node] = map[string]string{}
			}
			for _, id := range rec.ids[p.side] {
				owners[rec.node][id] = name
			}
		}
		p.r.mu.Unlock()
		for _, n := range p.l.nodes {
			v := fewestVictims(n.layout.Rings(), owners[n.name], p.low, size)
			if v >= 0 && (best < 0 || v < best) {
				best = v
			}
		}
	})
	return best, err
}

// schedulerMessage is the pod's PodScheduled condition message, or "".
func (p *prioRun) schedulerMessage(ctx context.Context, name string) string {
	pod, err := p.r.cs.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return ""
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			return c.Reason + ": " + c.Message
		}
	}
	return ""
}

// waitCell is a wait in seconds, or "never" when the pods at that
// percentile did not start within the budget.
func waitCell(s, budget float64) string {
	if math.IsInf(s, 1) {
		return fmt.Sprintf("never within %g s", budget)
	}
	return f(s, 2)
}

// ratio is a/b with two decimals, "" when b is 0.
func ratio(a, b int) string { return f(share(a, b), 2) }

var prioHeader = []string{"nodes", "arm", "low_pods", "high_pods", "high_started", "high_contiguous", "high_refused",
	"wait_p50_s", "wait_p99_s", "wait_budget_s", "preemptions", "victims", "fewest_victims", "victims_per_fewest",
	"evictions_freed_nothing", "harness_errors", "scheduler_message"}

// writePriority writes results-priority-N.csv; a wait that never came is
// +Inf.
func writePriority(cfg config, res *results) error {
	path := outPath(cfg, "results-priority-"+res.suffix()+".csv")
	fcsv, err := os.Create(path)
	if err != nil {
		return err
	}
	cw := csv.NewWriter(fcsv)
	cw.Write(prioHeader)
	for _, w := range res.Priority {
		cw.Write([]string{strconv.Itoa(res.Nodes), w.Arm, strconv.Itoa(w.LowPods), strconv.Itoa(w.High), strconv.Itoa(w.Started),
			strconv.Itoa(w.Contiguous), strconv.Itoa(w.Refused), f(w.WaitP50, 2), f(w.WaitP99, 2), f(w.Budget, 0),
			strconv.Itoa(w.Preemptions), strconv.Itoa(w.Victims), strconv.Itoa(w.Fewest), ratio(w.Victims, w.Fewest),
			strconv.Itoa(w.FreedNothing), strconv.Itoa(len(w.Errors)), w.Message})
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		fcsv.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return fcsv.Close()
}

// priorityTable is the priority workload's run as a markdown table.
func priorityTable(cfg config, res *results) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\nN=%d nodes (%d two-ring), %d LPUs, seed %d; low-priority 1/2-LPU pods fill the nodes, then %d high-priority pods (4, 8 in turn), one at a time, %v each\n\n",
		res.Nodes, res.TwoRing, res.Capacity, cfg.Seed, cfg.High, cfg.HighWait)
	b.WriteString("| arm | low pods | high started / submitted | contiguous | refused | wait p50 / p99 s | preemptions | victims (fewest possible) | victims per fewest | evictions that freed nothing |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
	for _, w := range res.Priority {
		fmt.Fprintf(&b, "| %s | %d | %d/%d | %d | %d | %s / %s | %d | %d (%d) | %s | %d |\n",
			w.Arm, w.LowPods, w.Started, w.High, w.Contiguous, w.Refused, waitCell(w.WaitP50, w.Budget), waitCell(w.WaitP99, w.Budget),
			w.Preemptions, w.Victims, w.Fewest, ratio(w.Victims, w.Fewest), w.FreedNothing)
	}
	for _, w := range res.Priority {
		if w.Message != "" {
			fmt.Fprintf(&b, "\n%s, scheduler on a pod that never started: %s", w.Arm, w.Message)
		}
		for _, e := range w.Errors[:min(len(w.Errors), 5)] {
			fmt.Fprintf(&b, "\nharness error in %s: %s", w.Arm, e)
		}
	}
	b.WriteString("\n")
	return b.String()
}

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/hyperaccel/lpu-node/internal/clustertest"
	"github.com/hyperaccel/lpu-node/lab/churn"

	"github.com/hyperaccel/lpu-node/pkg/inject"
)

// config is the command line.
type config struct {
	Nodes    int
	TwoRing  int
	Pods     int
	Seed     uint64
	Load     float64
	Unit     time.Duration
	Arms     []armSpec
	Out      string
	Replot   string // results or results-gang CSV to draw again, no run
	Manifest string
	Burst    int
	Score    int
	// Scheduler, when set, is the kube-scheduler binary to run instead of
	// the tools.sh one (lab/schedproto's prototype) in every arm but the
	// -proto ones, which run ProtoScheduler.
	Scheduler      string
	ProtoScheduler string
	// Coalesce delays a node's republish after a change by this much,
	// taking every change within it in one publication (0: at once).
	Coalesce time.Duration
	EveryArc bool   // publish every arc, not the shipped config's dra.arcSizes
	Profile  string // directory for a scheduler CPU profile per arm's burst
	// GangShare of the churn's arrivals are gangs of GangMix in the gang
	// arms (gang.go).
	GangShare float64
	GangMix   []gangShape
	// Workload is churn (the burst and the churn) or priority (fill with
	// low-priority pods, then High high-priority ones, each given
	// HighWait to start: priority_run.go).
	Workload string
	High     int
	HighWait time.Duration
	// inspect, when set, runs at the end of each arm's churn, before its
	// pods are deleted, with the admin kubeconfig (tests look at the
	// cluster through kubectl lpu there).
	inspect func(arm, kubeconfig string)
}

func parseFlags(args []string) (config, error) {
	fs := flag.NewFlagSet("cluster", flag.ContinueOnError)
	c := config{}
	fs.IntVar(&c.Nodes, "nodes", 10, "Node objects (each one ring of 8 LPUs)")
	fs.IntVar(&c.TwoRing, "two-ring", 0, "of those, nodes with two rings of 8 (the mixed case)")
	fs.IntVar(&c.Pods, "pods", 200, "arrivals per arm in the churn")
	fs.Uint64Var(&c.Seed, "seed", 1, "workload seed (the same jobs for every arm)")
	fs.Float64Var(&c.Load, "load", 0.9, "offered load, a share of the cluster's LPUs")
	fs.DurationVar(&c.Unit, "unit", 10*time.Second, "wall time of one mean job lifetime")
	arms := fs.String("arms", "all", "arms to run, comma-separated, or all: "+armNames()+
		"; a DRA arm that republishes may end in "+suffixPrefilter+" (node labels and the chart's prefilter policy), then any arm in "+suffixProto+" (run by -proto-scheduler)")
	fs.StringVar(&c.Out, "out", "notebooks/cluster", "directory for results-N.csv and cluster-N.svg")
	fs.StringVar(&c.Manifest, "manifest", "../deploy/manifests/lpu-node-dra.yaml", "rendered DRA manifest holding the shipped DeviceClasses and ResourceClaimTemplates")
	fs.IntVar(&c.Burst, "burst", 0, "pods created at once to measure scheduler throughput (0: 1.5 per node)")
	fs.BoolVar(&c.EveryArc, "every-arc", false, "publish every arc of every ring (57 per ring of 8), not the manifest config's dra.arcSizes")
	fs.StringVar(&c.Profile, "profile", "", "`DIR` for a CPU profile of kube-scheduler over the first 15 s of each arm's burst (<arm>-scheduler.pprof; go tool pprof reads it)")
	fs.StringVar(&c.Scheduler, "kube-scheduler", "", "`PATH` of a kube-scheduler to run instead of the tools.sh v1.37.2 build (e.g. lab/schedproto's pool-cache prototype)")
	fs.StringVar(&c.ProtoScheduler, "proto-scheduler", "", "`PATH` of the kube-scheduler that the arms named ARM"+suffixProto+" run (lab/schedproto's pool-cache prototype); kube-scheduler is restarted between arms that differ")
	fs.DurationVar(&c.Coalesce, "coalesce", 0, "delay each node's republish after a change by this much, one publication for every change within it (0: publish at once)")
	fs.IntVar(&c.Score, "nodes-to-score", 0, "kube-scheduler percentageOfNodesToScore (0: the scheduler's adaptive default)")
	fs.Float64Var(&c.GangShare, "gang-share", 0.3, "gang arms: share of the churn's arrivals that are gangs")
	fs.StringVar(&c.Replot, "replot", "", "draw the chart of an earlier run from `CSV`, its results-<nodes>.csv or results-gang-<nodes>.csv, as cluster-<nodes>.svg or cluster-gang-<nodes>.svg in -out (give that run's -pods, -seed, -load and -gang-share for the caption), and start nothing")
	fs.StringVar(&c.Workload, "workload", workloadChurn, "what each arm runs: "+workloadChurn+" (a burst, then the churn) or "+workloadPriority+" (fill the nodes with low-priority 1- and 2-LPU pods, then submit high-priority 4- and 8-LPU pods one at a time; default arms "+priorityArms+")")
	fs.IntVar(&c.High, "high", 0, "priority workload: high-priority pods (0: one per node)")
	fs.DurationVar(&c.HighWait, "high-wait", 30*time.Second, "priority workload: how long each high-priority pod may take to start before it counts as never started")
	mix := fs.String("gang-mix", "2x8,4x4,2x4", "gang arms: the gangs, PODSxARC[mMINCOUNT], comma-separated, drawn evenly")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	var err error
	if c.GangMix, err = parseGangMix(*mix); err != nil {
		return c, fmt.Errorf("-gang-mix: %w", err)
	}
	if err := c.checkRanges(); err != nil {
		return c, err
	}
	if c.Burst == 0 {
		c.Burst = c.Nodes * 3 / 2
	}
	if c.High == 0 {
		c.High = c.Nodes
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	if c.Workload == workloadPriority && !set["arms"] {
		*arms = priorityArms
	}
	if c.Arms, err = parseArms(*arms); err != nil {
		return c, fmt.Errorf("-arms: %w", err)
	}
	if err := c.checkWorkload(); err != nil {
		return c, err
	}
	proto := slices.ContainsFunc(c.Arms, func(a armSpec) bool { return a.proto })
	switch {
	case proto && c.ProtoScheduler == "":
		return c, fmt.Errorf("-arms %s: an arm ending in %s needs -proto-scheduler PATH", *arms, suffixProto)
	case !proto && c.ProtoScheduler != "":
		return c, fmt.Errorf("-proto-scheduler %s: no arm ending in %s runs it", c.ProtoScheduler, suffixProto)
	}
	return c, nil
}

// checkRanges refuses a numeric flag out of its range, naming it.
func (c config) checkRanges() error {
	switch {
	case c.Nodes < 1:
		return fmt.Errorf("-nodes %d: want at least 1", c.Nodes)
	case c.TwoRing < 0 || c.TwoRing > c.Nodes:
		return fmt.Errorf("-two-ring %d: want 0..%d (-nodes)", c.TwoRing, c.Nodes)
	case c.Pods < 1:
		return fmt.Errorf("-pods %d: want at least 1", c.Pods)
	case c.Load <= 0 || c.Load > 2:
		return fmt.Errorf("-load %g: want (0, 2]", c.Load)
	case c.Score < 0 || c.Score > 100:
		return fmt.Errorf("-nodes-to-score %d: want 0..100", c.Score)
	case c.Unit < time.Second:
		return fmt.Errorf("-unit %v: want at least 1s (the scheduler's retry backoff is 1 s)", c.Unit)
	case c.GangShare < 0 || c.GangShare > 1:
		return fmt.Errorf("-gang-share %g: want 0..1", c.GangShare)
	case c.Coalesce < 0:
		return fmt.Errorf("-coalesce %v: want 0 or more", c.Coalesce)
	}
	return nil
}

// checkWorkload refuses an unknown -workload, and gang arms in the
// priority workload (their pods are the churn's).
func (c config) checkWorkload() error {
	switch c.Workload {
	case workloadChurn:
		return nil
	case workloadPriority:
	default:
		return fmt.Errorf("-workload %q: want %s or %s", c.Workload, workloadChurn, workloadPriority)
	}
	if c.High < 1 || c.HighWait < time.Second {
		return fmt.Errorf("-high %d, -high-wait %v: want at least 1 pod and 1s", c.High, c.HighWait)
	}
	for _, a := range c.Arms {
		if a.gang != "" {
			return fmt.Errorf("arm %s: gang arms run the churn, not -workload %s", a.name, workloadPriority)
		}
	}
	return nil
}

// Arm name suffixes: ARM-prefilter keeps node labels and installs the
// chart's prefilter policy (prefilter.go); ARM-proto, and
// ARM-prefilter-proto, run -proto-scheduler.
const (
	suffixPrefilter = "-prefilter"
	suffixProto     = "-proto"
)

// parseArms reads -arms: names, comma-separated, each "all" or an arm
// lookupArm knows. An arm named twice is refused: its pods and rows
// would be mixed up.
func parseArms(s string) ([]armSpec, error) {
	var out []armSpec
	seen := map[string]bool{}
	for _, name := range strings.Split(s, ",") {
		name = strings.TrimSpace(name)
		as := allArms
		if name != "all" {
			a, err := lookupArm(name)
			if err != nil {
				return nil, err
			}
			as = []armSpec{a}
		}
		for _, a := range as {
			if seen[a.name] {
				return nil, fmt.Errorf("arm %q named twice", a.name)
			}
			seen[a.name] = true
			out = append(out, a)
		}
	}
	return out, nil
}

// lookupArm finds the arm name: a base arm, optionally followed by
// -prefilter (only a DRA arm that republishes: lpu-dra sets its labels
// as it publishes), then optionally by -proto.
func lookupArm(name string) (armSpec, error) {
	base, proto := strings.CutSuffix(name, suffixProto)
	base, prefilter := strings.CutSuffix(base, suffixPrefilter)
	for _, a := range append(allArms[:len(allArms):len(allArms)], gangArms...) {
		if a.name != base {
			continue
		}
		if prefilter && !(a.dra && a.dynamic) {
			return armSpec{}, fmt.Errorf("arm %q: %s needs a DRA arm that republishes, %s does not", name, suffixPrefilter, base)
		}
		a.name, a.prefilter, a.proto = name, prefilter, proto
		return a, nil
	}
	return armSpec{}, fmt.Errorf("unknown arm %q (want %s, each optionally followed by %s, then by %s)", name, armNames(), suffixPrefilter, suffixProto)
}

func armNames() string {
	var n []string
	for _, a := range append(allArms[:len(allArms):len(allArms)], gangArms...) {
		n = append(n, a.name)
	}
	return strings.Join(n, ", ")
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		slog.Error("exiting", "err", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	cfg, err := parseFlags(args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if cfg.Replot != "" {
		return replot(cfg)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	logf := func(f string, a ...any) { fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05 ")+f+"\n", a...) }
	if cfg.Profile != "" {
		if err := os.MkdirAll(cfg.Profile, 0o755); err != nil {
			return fmt.Errorf("create %s: %w", cfg.Profile, err)
		}
	}
	res, err := bench(ctx, cfg, logf)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", cfg.Out, err)
	}
	if cfg.Workload == workloadPriority {
		if err := writePriority(cfg, res); err != nil {
			return err
		}
		fmt.Print(priorityTable(cfg, res))
		return nil
	}
	if err := writeResults(cfg, res); err != nil {
		return err
	}
	fmt.Print(table(cfg, res))
	return nil
}

// lab is what every arm of a run shares: the control plane and its
// record, the admin client, the scheduler's scraper, the nodes and the
// jobs.
type lab struct {
	cfg             config
	c               *clustertest.Cluster
	st              *state
	cs              kubernetes.Interface
	sc              *scraper
	bins            clustertest.Binaries // as started: kube-scheduler is -kube-scheduler, if given
	shipped         *shipped
	nodes           []*simNode
	jobs, burstJobs []churn.Job
	logf            func(string, ...any)
	proto           bool      // kube-scheduler is -proto-scheduler now
	prio            []prioRow // the priority workload's rows
}

// bench runs every arm of cfg on one control plane and returns the rows.
func bench(ctx context.Context, cfg config, logf func(string, ...any)) (*results, error) {
	bins, shipped, err := preflight(cfg, logf)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "lpu-cluster-")
	if err != nil {
		return nil, fmt.Errorf("temp dir: %w", err)
	}
	st := &state{Harness: os.Getpid(), Dir: dir}
	if err := st.save(); err != nil {
		return nil, err
	}
	defer func() {
		_ = os.RemoveAll(dir)
		_ = os.Remove(stateFile())
	}()
	c, err := startControlPlane(ctx, dir, bins, cfg.Score, cfg.Profile != "", cfg.gangs(), logf)
	if err != nil {
		return nil, err
	}
	defer func() { _ = c.Stop() }()
	schedPort, err := st.record(c, bins)
	if err != nil {
		return nil, err
	}
	admin := c.Config
	admin.QPS, admin.Burst = 1000, 2000
	cs, err := kubernetes.NewForConfig(admin)
	if err != nil {
		return nil, err
	}
	sc, err := newScraper(admin, schedPort)
	if err != nil {
		return nil, err
	}

	nodes, caps, capacity, err := setupCluster(ctx, cs, cfg, shipped, logf)
	if err != nil {
		return nil, err
	}
	l := &lab{cfg: cfg, c: c, st: st, cs: cs, sc: sc, bins: bins, shipped: shipped, nodes: nodes, logf: logf,
		jobs:      churn.Generate(cfg.Seed, churn.MixDefault, cfg.Pods, cfg.churnLoad(logf), capacity),
		burstJobs: churn.Generate(cfg.Seed+1, churn.MixDefault, cfg.Burst, cfg.Load, capacity)}
	res := &results{Nodes: cfg.Nodes, TwoRing: cfg.TwoRing, Pods: cfg.Pods, Capacity: capacity, Coalesce: cfg.Coalesce, Bound: countBound(l.jobs, caps)}
	for _, j := range l.jobs {
		if j.Size > 1 {
			res.Multi++
		}
	}

	if res.Rows, err = l.runArms(ctx); err != nil {
		return nil, err
	}
	res.Priority = l.prio
	return res, nil
}

// runArms runs the arms in order, switching the nodes between the device
// plugin and DRA, and kube-scheduler between the -kube-scheduler one and
// -proto-scheduler, when the next arm needs the other, and returns their
// rows.
func (l *lab) runArms(ctx context.Context) ([]row, error) {
	var out []row
	draOn := false
	for i, arm := range l.cfg.Arms {
		if arm.proto != l.proto {
			if err := l.switchScheduler(ctx, arm.proto); err != nil {
				return nil, err
			}
		}
		// The nodes start in neither mode: a device-plugin arm first
		// must still give them their hyperaccel.ai/lpu capacity.
		if arm.dra != draOn || i == 0 {
			if err := switchMode(ctx, l.cs, l.nodes, arm.dra, l.logf); err != nil {
				return nil, err
			}
			draOn = arm.dra
		}
		rows, err := l.runPrepared(ctx, arm)
		if err != nil {
			return nil, fmt.Errorf("arm %s: %w", arm.name, err)
		}
		out = append(out, rows...)
	}
	if draOn {
		for _, n := range l.nodes {
			n.ctrl.Stop()
		}
	}
	return out, nil
}

// runPrepared runs one arm from the empty node's slices (DRA) and, for a
// prefilter arm, with the node labels kept and the chart's policy in
// place, both gone again when it returns.
func (l *lab) runPrepared(ctx context.Context, arm armSpec) (rows []row, err error) {
	var pf *prefilter
	if arm.prefilter {
		if pf, err = startPrefilter(ctx, l); err != nil {
			return nil, err
		}
		defer func() {
			if serr := pf.stop(ctx); serr != nil && err == nil {
				err = serr
			}
		}()
	}
	if arm.dra {
		if err := resetSlices(ctx, l.cs, l.nodes); err != nil {
			return nil, err
		}
	}
	if l.cfg.Workload == workloadPriority {
		w, err := l.runPriority(ctx, arm)
		if err == nil {
			l.prio = append(l.prio, w)
		}
		return nil, err
	}
	return runArm(ctx, l, arm, pf)
}

// switchScheduler restarts kube-scheduler as -proto-scheduler (proto) or
// as the run's own, and records its new PID and binary for the next
// run's clean-up.
func (l *lab) switchScheduler(ctx context.Context, proto bool) error {
	bin := l.bins.KubeScheduler
	if proto {
		bin = l.cfg.ProtoScheduler
	}
	start := time.Now()
	if err := l.c.RestartScheduler(ctx, bin); err != nil {
		return err
	}
	l.proto = proto
	l.st.PIDs, l.st.Exes["kube-scheduler"] = l.c.PIDs(), bin
	l.logf("kube-scheduler restarted as %s in %v", bin, time.Since(start).Round(100*time.Millisecond))
	return l.st.save()
}

// preflight clears what a killed run left, checks the machine has the
// memory for cfg, and finds the control plane's binaries and the shipped
// chart's claim templates.
func preflight(cfg config, logf func(string, ...any)) (clustertest.Binaries, *shipped, error) {
	if err := cleanupStale(logf); err != nil {
		return clustertest.Binaries{}, nil, err
	}
	live := cfg.Nodes*8*2 + cfg.Burst // generous bound on live pods
	msg, err := checkMemory(cfg.Nodes+cfg.TwoRing, live)
	if err != nil {
		return clustertest.Binaries{}, nil, err
	}
	logf("%s", msg)
	bins, err := clustertest.FindBinaries()
	if err != nil {
		return clustertest.Binaries{}, nil, fmt.Errorf("%w (build them with: bash test/e2e/tools.sh kube etcd)", err)
	}
	if cfg.Scheduler != "" {
		if err := clustertest.CheckExecutable(cfg.Scheduler); err != nil {
			return clustertest.Binaries{}, nil, fmt.Errorf("-kube-scheduler: %w", err)
		}
		bins.KubeScheduler = cfg.Scheduler
	}
	if cfg.ProtoScheduler != "" {
		if err := clustertest.CheckExecutable(cfg.ProtoScheduler); err != nil {
			return clustertest.Binaries{}, nil, fmt.Errorf("-proto-scheduler: %w", err)
		}
	}
	shipped, err := loadShipped(cfg.Manifest, churn.MixDefault.Sizes)
	if err != nil {
		return clustertest.Binaries{}, nil, err
	}
	if i := slices.IndexFunc(cfg.Arms, func(a armSpec) bool { return a.prefilter }); i >= 0 && shipped.prefilter.policy == nil {
		return clustertest.Binaries{}, nil, fmt.Errorf("arm %s: %s has no MutatingAdmissionPolicy named *%s (the chart's prefilter policy)", cfg.Arms[i].name, cfg.Manifest, prefilterPolicySuffix)
	}
	return bins, shipped, nil
}

// resetSlices republishes every node's pool in the empty node's order, so
// that every DRA arm starts from it, and waits until the API server has
// the slices.
func resetSlices(ctx context.Context, cs kubernetes.Interface, nodes []*simNode) error {
	for _, n := range nodes {
		n.publish(n.builder.Slices(nil, nil), n.builder.Free(nil, nil))
	}
	return waitSlices(ctx, cs, nodes)
}

// record adds the running components' PIDs, binaries and ports to the run
// record, and returns the scheduler's port.
func (st *state) record(c *clustertest.Cluster, bins clustertest.Binaries) (int, error) {
	st.PIDs, st.Exes = c.PIDs(), map[string]string{
		"etcd": bins.Etcd, "kube-apiserver": bins.KubeAPIServer, "kube-scheduler": bins.KubeScheduler,
		"kube-controller-manager": bins.KubeControllerManager,
	}
	if u, err := url.Parse(c.Server); err == nil {
		if p, err := strconv.Atoi(u.Port()); err == nil {
			st.Ports = append(st.Ports, p)
		}
	}
	schedPort, err := securePort(st.PIDs["kube-scheduler"])
	if err != nil {
		return 0, err
	}
	st.Ports = append(st.Ports, schedPort)
	return schedPort, st.save()
}

// setupCluster registers the nodes and installs the DRA objects.
func setupCluster(ctx context.Context, cs kubernetes.Interface, cfg config, shipped *shipped, logf func(string, ...any)) ([]*simNode, []int, int, error) {
	var nodes []*simNode
	var caps []int
	sizes := shipped.arcSizes
	if cfg.EveryArc {
		sizes = nil
	}
	for i := 0; i < cfg.Nodes; i++ {
		rings := 1
		if i >= cfg.Nodes-cfg.TwoRing {
			rings = 2
		}
		n, err := newSimNode(fmt.Sprintf("node-%04d", i), rings, sizes)
		if err != nil {
			return nil, nil, 0, err
		}
		nodes = append(nodes, n)
		caps = append(caps, 8*rings)
	}
	capacity := 0
	for _, k := range caps {
		capacity += k
	}
	if err := createNodes(ctx, cs, nodes); err != nil {
		return nil, nil, 0, err
	}
	if err := waitServiceAccount(ctx, cs); err != nil {
		return nil, nil, 0, err
	}
	if err := installDRA(ctx, cs, shipped); err != nil {
		return nil, nil, 0, err
	}
	published := "every arc"
	if len(sizes) > 0 {
		published = fmt.Sprintf("arcs of sizes %v", sizes)
	}
	logf("%d nodes (%d with two rings), %d LPUs registered; DRA arms publish %s", len(nodes), cfg.TwoRing, capacity, published)

	return nodes, caps, capacity, nil
}

// switchMode moves the nodes between DRA (slice controllers running, no
// count resource) and the device plugin (hyperaccel.ai/lpu advertised,
// no slices).
func switchMode(ctx context.Context, cs kubernetes.Interface, nodes []*simNode, dra bool, logf func(string, ...any)) error {
	if dra {
		// StartController waits for its informer to sync, about a second
		// each: start them side by side.
		start := time.Now()
		if err := parallel(ctx, len(nodes), 32, func(i int) error {
			n := nodes[i]
			ctrl, err := resourceslice.StartController(ctx, resourceslice.Options{
				DriverName: inject.Driver, KubeClient: cs,
				Owner:     &resourceslice.Owner{APIVersion: "v1", Kind: "Node", Name: n.name},
				Resources: &resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{n.name: {Slices: n.builder.Slices(nil, nil)}}},
				ErrorHandler: func(_ context.Context, err error, msg string) {
					logf("publish slices of %s: %s: %v", n.name, msg, err)
				},
			})
			if err != nil {
				return fmt.Errorf("start slice controller for %s: %w", n.name, err)
			}
			n.ctrl = ctrl
			return nil
		}); err != nil {
			return err
		}
		if err := waitSlices(ctx, cs, nodes); err != nil {
			return err
		}
		logf("%d nodes' ResourceSlices published in %v", len(nodes), time.Since(start).Round(100*time.Millisecond))
		return setLPUCapacity(ctx, cs, nodes, false)
	}
	for _, n := range nodes {
		if n.ctrl != nil {
			n.ctrl.Update(&resourceslice.DriverResources{})
		}
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		l, err := cs.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err != nil {
			return fmt.Errorf("list resourceslices: %w", err)
		}
		if len(l.Items) == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d resourceslices left 2 min after unpublishing", len(l.Items))
		}
		time.Sleep(500 * time.Millisecond)
	}
	for _, n := range nodes {
		if n.ctrl != nil {
			n.ctrl.Stop()
			n.ctrl = nil
		}
	}
	return setLPUCapacity(ctx, cs, nodes, true)
}

// waitSlices waits until every node's pool is stored: 2 slices per ring
// of 8 (57 arcs, then the counter set).
func waitSlices(ctx context.Context, cs kubernetes.Interface, nodes []*simNode) error {
	want := 0
	for _, n := range nodes {
		want += len(n.builder.Slices(nil, nil))
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		l, err := cs.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err != nil {
			return fmt.Errorf("list resourceslices: %w", err)
		}
		if len(l.Items) == want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d resourceslices stored after 3 min", len(l.Items), want)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// outPath is a file in the output directory.
func outPath(cfg config, name string) string { return filepath.Join(cfg.Out, name) }

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
	"strconv"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/hyperaccel/lpu-node/test/churn"
	"github.com/hyperaccel/lpu-node/test/clustertest"

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
	Replot   string // results-gang CSV to draw again, no run
	Manifest string
	Burst    int
	Score    int
	// Scheduler, when set, is the kube-scheduler binary to run instead of
	// the tools.sh one (test/schedproto's prototype).
	Scheduler string
	EveryArc  bool   // publish every arc, not the shipped config's dra.arcSizes
	Profile   string // directory for a scheduler CPU profile per arm's burst
	// GangShare of the churn's arrivals are gangs of GangMix in the gang
	// arms (gang.go).
	GangShare float64
	GangMix   []gangShape
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
	arms := fs.String("arms", "all", "arms to run, comma-separated, or all: "+armNames())
	fs.StringVar(&c.Out, "out", "docs/benchmarks/cluster", "directory for results.csv and cluster.png")
	fs.StringVar(&c.Manifest, "manifest", "deploy/manifests/lpu-node-dra.yaml", "rendered DRA manifest holding the shipped DeviceClasses and ResourceClaimTemplates")
	fs.IntVar(&c.Burst, "burst", 0, "pods created at once to measure scheduler throughput (0: 1.5 per node)")
	fs.BoolVar(&c.EveryArc, "every-arc", false, "publish every arc of every ring (57 per ring of 8), not the manifest config's dra.arcSizes")
	fs.StringVar(&c.Profile, "profile", "", "`DIR` for a CPU profile of kube-scheduler over the first 15 s of each arm's burst (<arm>-scheduler.pprof; go tool pprof reads it)")
	fs.StringVar(&c.Scheduler, "kube-scheduler", "", "`PATH` of a kube-scheduler to run instead of the tools.sh v1.37.2 build (e.g. test/schedproto's pool-cache prototype)")
	fs.IntVar(&c.Score, "nodes-to-score", 0, "kube-scheduler percentageOfNodesToScore (0: the scheduler's adaptive default)")
	fs.Float64Var(&c.GangShare, "gang-share", 0.3, "gang arms: share of the churn's arrivals that are gangs")
	fs.StringVar(&c.Replot, "replot", "", "draw cluster-gang-<nodes>.png into -out from `CSV`, a results-gang-<nodes>.csv of an earlier run (give that run's -pods, -gang-share, -seed, -load for the caption), and start nothing")
	mix := fs.String("gang-mix", "2x8,4x4,2x4", "gang arms: the gangs, PODSxARC[mMINCOUNT], comma-separated, drawn evenly")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	var err error
	if c.GangMix, err = parseGangMix(*mix); err != nil {
		return c, fmt.Errorf("-gang-mix: %w", err)
	}
	switch {
	case c.Nodes < 1:
		return c, fmt.Errorf("-nodes %d: want at least 1", c.Nodes)
	case c.TwoRing < 0 || c.TwoRing > c.Nodes:
		return c, fmt.Errorf("-two-ring %d: want 0..%d (-nodes)", c.TwoRing, c.Nodes)
	case c.Pods < 1:
		return c, fmt.Errorf("-pods %d: want at least 1", c.Pods)
	case c.Load <= 0 || c.Load > 2:
		return c, fmt.Errorf("-load %g: want (0, 2]", c.Load)
	case c.Score < 0 || c.Score > 100:
		return c, fmt.Errorf("-nodes-to-score %d: want 0..100", c.Score)
	case c.Unit < time.Second:
		return c, fmt.Errorf("-unit %v: want at least 1s (the scheduler's retry backoff is 1 s)", c.Unit)
	case c.GangShare < 0 || c.GangShare > 1:
		return c, fmt.Errorf("-gang-share %g: want 0..1", c.GangShare)
	}
	if c.Burst == 0 {
		c.Burst = c.Nodes * 3 / 2
	}
	for _, name := range strings.Split(*arms, ",") {
		name = strings.TrimSpace(name)
		if name == "all" {
			c.Arms = allArms
			continue
		}
		found := false
		for _, a := range append(allArms[:len(allArms):len(allArms)], gangArms...) {
			if a.name == name {
				c.Arms, found = append(c.Arms, a), true
			}
		}
		if !found {
			return c, fmt.Errorf("-arms: unknown arm %q (want %s)", name, armNames())
		}
	}
	return c, nil
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
		return replotGang(cfg)
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
	if err := writeResults(cfg, res); err != nil {
		return err
	}
	fmt.Print(table(cfg, res))
	return nil
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
	jobs := churn.Generate(cfg.Seed, churn.MixDefault, cfg.Pods, cfg.churnLoad(logf), capacity)
	burstJobs := churn.Generate(cfg.Seed+1, churn.MixDefault, cfg.Burst, cfg.Load, capacity)
	res := &results{Nodes: cfg.Nodes, TwoRing: cfg.TwoRing, Pods: cfg.Pods, Capacity: capacity, Bound: countBound(jobs, caps)}
	for _, j := range jobs {
		if j.Size > 1 {
			res.Multi++
		}
	}

	if res.Rows, err = runArms(ctx, cfg, cs, sc, st.PIDs, nodes, jobs, burstJobs, c.Kubeconfig, logf); err != nil {
		return nil, err
	}
	return res, nil
}

// runArms runs cfg's arms in order, switching the nodes between the
// device plugin and DRA when the next arm needs the other, and returns
// their rows.
func runArms(ctx context.Context, cfg config, cs kubernetes.Interface, sc *scraper, pids map[string]int, nodes []*simNode, jobs, burstJobs []churn.Job, kubeconfig string, logf func(string, ...any)) ([]row, error) {
	var out []row
	draOn := false
	for _, arm := range cfg.Arms {
		if arm.dra != draOn {
			if err := switchMode(ctx, cs, nodes, arm.dra, logf); err != nil {
				return nil, err
			}
			draOn = arm.dra
		}
		if arm.dra {
			if err := resetSlices(ctx, cs, nodes); err != nil {
				return nil, err
			}
		}
		rows, err := runArm(ctx, cfg, cs, sc, pids, arm, nodes, jobs, burstJobs, kubeconfig, logf)
		if err != nil {
			return nil, fmt.Errorf("arm %s: %w", arm.name, err)
		}
		out = append(out, rows...)
	}
	if draOn {
		for _, n := range nodes {
			n.ctrl.Stop()
		}
	}
	return out, nil
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
	shipped, err := loadShipped(cfg.Manifest, churn.MixDefault.Sizes)
	if err != nil {
		return clustertest.Binaries{}, nil, err
	}
	return bins, shipped, nil
}

// resetSlices republishes every node's pool in the empty node's order, so
// that every DRA arm starts from it, and waits until the API server has
// the slices.
func resetSlices(ctx context.Context, cs kubernetes.Interface, nodes []*simNode) error {
	for _, n := range nodes {
		n.ctrl.Update(&resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{n.name: {Slices: n.builder.Slices(nil, nil)}}})
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

package main

import (
	"encoding/csv"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/hyperaccel/lpu-node/lab/churn"
	"github.com/hyperaccel/lpu-node/pkg/alloc"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		slog.Error("exiting", "err", err)
		os.Exit(1)
	}
}

// Config is one simulator invocation.
type Config struct {
	Arrivals int
	Seed     uint64
	Load     float64
	Mixes    []churn.Mix
	Nodes    []Node
	Strict   bool
	Ablation string // "", "all", or comma-separated variant names such as LSAP,CLSAP
	DRA      bool   // also run dra-static and dra-dynamic (lpu-dra's published order)
	Count    bool   // also run count-static and count-dynamic (hyperaccel.ai/lpu: k over single-LPU devices)
	OutDir   string
}

// Mode names the admission mode: "strict" or "best-effort".
func (c Config) Mode() string {
	if c.Strict {
		return "strict"
	}
	return "best-effort"
}

func parseFlags(args []string) (Config, error) {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	arrivals := fs.Int("arrivals", 100_000, "jobs per node and mix (every policy replays the same jobs)")
	seed := fs.Uint64("seed", 1, "seed of the job sequence and of kubelet's arbitrary choice")
	load := fs.Float64("load", 0.9, "offered load: arrival rate × mean size × mean lifetime / node capacity")
	mixes := fs.String("mix", "default all-small all-large", "space-separated size mixes: default (1:40,2:30,4:20,8:10), all-small (1:50,2:50), all-large (4:50,8:50), or size:weight,…")
	nodes := fs.String("node", "1x8 2x8 1x16", "space-separated node shapes RINGSxLPUS")
	strict := fs.Bool("strict", false, "refuse non-contiguous picks (the strict policy) instead of admitting them (best-effort)")
	ablation := fs.String("ablation", "", `also run scoring variants by brute force (slow): "all", or names such as LSAP,CLSAP (L largest arc, S segments, A alignment, P position, C power-of-two capacity, W area, V segment vector, B best fit, T oracle end times, +F brute-force fallback)`)
	dra := fs.Bool("dra", false, "also run the DRA allocator on lpu-dra's published arc order: dra-static (the empty node's order) and dra-dynamic (republished after every change)")
	count := fs.Bool("count-path", false, "also run the count path on a DRA node (hyperaccel.ai/lpu: k served by a DeviceClass over single-LPU devices, the first k free in published order): count-static (ring order) and count-dynamic (longest free run first, republished after every change)")
	out := fs.String("out", filepath.Join("sim", "out"), "output directory for results.csv, sizes.csv and rates.svg")
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	cfg := Config{Arrivals: *arrivals, Seed: *seed, Load: *load, Strict: *strict, Ablation: *ablation, DRA: *dra, Count: *count, OutDir: *out}
	if cfg.Arrivals < 1 || cfg.Arrivals > 10_000_000 {
		return Config{}, fmt.Errorf("-arrivals %d: want 1..10000000", cfg.Arrivals)
	}
	if !(cfg.Load > 0 && cfg.Load <= 10) {
		return Config{}, fmt.Errorf("-load %v: want a number in (0, 10]", cfg.Load)
	}
	for _, s := range strings.Fields(*mixes) {
		m, err := ParseMix(s)
		if err != nil {
			return Config{}, fmt.Errorf("-mix: %w", err)
		}
		cfg.Mixes = append(cfg.Mixes, m)
	}
	for _, s := range strings.Fields(*nodes) {
		n, err := ParseNode(s)
		if err != nil {
			return Config{}, fmt.Errorf("-node: %w", err)
		}
		cfg.Nodes = append(cfg.Nodes, n)
	}
	if len(cfg.Mixes) == 0 || len(cfg.Nodes) == 0 {
		return Config{}, fmt.Errorf("-mix and -node need at least one value each")
	}
	return cfg, nil
}

func run(args []string, stdout io.Writer) error {
	cfg, err := parseFlags(args)
	if err != nil {
		return err
	}
	start := time.Now()
	results, err := Run(cfg)
	if err != nil {
		return err
	}
	elapsed := time.Since(start)

	if err := os.MkdirAll(cfg.OutDir, 0o755); err != nil {
		return fmt.Errorf("create output dir: %w", err)
	}
	if err := writeFile(filepath.Join(cfg.OutDir, "results.csv"), func(w io.Writer) error { return WriteCSV(w, cfg, results) }); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(cfg.OutDir, "sizes.csv"), func(w io.Writer) error { return WriteSizesCSV(w, results) }); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(cfg.OutDir, "rates.svg"), func(w io.Writer) error { return WriteChart(w, cfg, results) }); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "seed %d, %d arrivals per node and mix, offered load %.2f, %s mode\n\n", cfg.Seed, cfg.Arrivals, cfg.Load, cfg.Mode())
	if err := WriteTable(stdout, cfg, results); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nwrote %s/{results.csv,sizes.csv,rates.svg} in %.1fs\n", cfg.OutDir, elapsed.Seconds())
	return nil
}

func writeFile(path string, fn func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	if err := fn(f); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", path, err)
	}
	return nil
}

// Case is one node and mix: the results of every policy on its job sequence.
type Case struct {
	Node    Node
	Mix     churn.Mix
	Results []Result // count bound first
}

// Bound is the count bound result of the case.
func (c Case) Bound() Result { return c.Results[0] }

// Policies returns the policies to compare on node, in report order;
// seed drives kubelet's arbitrary choice, mix is known only to the
// ablation's mix-aware variant.
func Policies(node Node, mix churn.Mix, seed uint64, ablation string) ([]Policy, error) {
	l, err := alloc.NewLayout(node.Rings)
	if err != nil {
		return nil, err
	}
	ps := []Policy{newKubeletDefault(seed), firstFit{node: node}, ours{l: l}}
	if ablation != "" {
		want := strings.Split(ablation, ",")
		for _, v := range Variants(node, mix, l) {
			if ablation == "all" || slices.Contains(want, strings.TrimPrefix(v.Name(), "v:")) {
				ps = append(ps, v)
			}
		}
	}
	return ps, nil
}

// Run simulates every node × mix case, in parallel, deterministically.
func Run(cfg Config) ([]Case, error) {
	var cases []Case
	for _, n := range cfg.Nodes {
		for _, m := range cfg.Mixes {
			cases = append(cases, Case{Node: n, Mix: m})
		}
	}
	errs := make([]error, len(cases))
	work := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < runtime.GOMAXPROCS(0); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				cases[i].Results, errs[i] = runCase(cfg, cases[i].Node, cases[i].Mix)
			}
		}()
	}
	for i := range cases {
		work <- i
	}
	close(work)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("node %s mix %s: %w", cases[i].Node.Name, cases[i].Mix.Name, err)
		}
	}
	return cases, nil
}

func runCase(cfg Config, node Node, mix churn.Mix) ([]Result, error) {
	for _, s := range mix.Sizes {
		if s > node.Capacity() {
			return nil, fmt.Errorf("size %d exceeds the node's %d LPUs", s, node.Capacity())
		}
	}
	jobs := churn.Generate(cfg.Seed, mix, cfg.Arrivals, cfg.Load, node.Capacity())
	// kubelet's arbitrary choice gets its own stream per case, derived
	// from the seed and the case's name, so adding cases changes nothing.
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%s/%s", cfg.Seed, node.Name, mix.String())
	policies, err := Policies(node, mix, h.Sum64(), cfg.Ablation)
	if err == nil && cfg.DRA {
		l, _ := alloc.NewLayout(node.Rings) // Policies checked the rings
		policies = append(policies, newDRA(l, false), newDRA(l, true))
	}
	if err == nil && cfg.Count {
		l, _ := alloc.NewLayout(node.Rings)
		policies = append(policies, countPath{l: l}, countPath{l: l, dynamic: true})
	}
	if err != nil {
		return nil, err
	}
	bound, err := Simulate(node, jobs, nil, cfg.Strict)
	if err != nil {
		return nil, err
	}
	out := []Result{bound}
	for _, p := range policies {
		r, err := Simulate(node, jobs, p, cfg.Strict)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

func ratio(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func f6(x float64) string { return strconv.FormatFloat(x, 'f', 6, 64) }

// WriteCSV writes one row per node, mix and policy.
func WriteCSV(w io.Writer, cfg Config, cases []Case) error {
	cw := csv.NewWriter(w)
	cw.Write([]string{"node", "mix", "mix_weights", "policy", "mode", "seed", "load", "arrivals", "admitted",
		"contiguous", "contiguous_rate", "ratio_to_count_bound", "non_contiguous", "mean_largest_free_arc", "utilisation", "arc_free", "contiguous_when_arc_free"})
	for _, c := range cases {
		b := c.Bound()
		for _, r := range c.Results {
			cw.Write([]string{c.Node.Name, c.Mix.Name, c.Mix.String(), r.Policy, cfg.Mode(),
				strconv.FormatUint(cfg.Seed, 10), f6(cfg.Load), strconv.Itoa(r.Arrivals), strconv.Itoa(r.Admitted),
				strconv.Itoa(r.Contiguous), f6(r.Rate()), f6(ratio(r.Contiguous, b.Contiguous)),
				strconv.Itoa(r.NonContiguous), f6(r.MeanLargestArc()), f6(r.Utilisation(c.Node.Capacity())),
				strconv.Itoa(r.ArcFree), strconv.Itoa(r.ContiguousWhenArcFree)})
		}
	}
	cw.Flush()
	return cw.Error()
}

// WriteSizesCSV writes contiguous admissions per request size.
func WriteSizesCSV(w io.Writer, cases []Case) error {
	cw := csv.NewWriter(w)
	cw.Write([]string{"node", "mix", "policy", "size", "arrivals", "contiguous", "ratio_to_count_bound"})
	for _, c := range cases {
		b := c.Bound()
		sizes := slices.Sorted(maps.Keys(b.BySize))
		for _, r := range c.Results {
			for _, s := range sizes {
				v := r.BySize[s]
				cw.Write([]string{c.Node.Name, c.Mix.Name, r.Policy, strconv.Itoa(s), strconv.Itoa(v[0]),
					strconv.Itoa(v[1]), f6(ratio(v[1], b.BySize[s][1]))})
			}
		}
	}
	cw.Flush()
	return cw.Error()
}

// WriteTable writes the human-readable summary.
func WriteTable(w io.Writer, cfg Config, cases []Case) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	nonContig := "non-contig"
	if cfg.Strict {
		nonContig = "refused"
	}
	fmt.Fprintf(tw, "node\tmix\tpolicy\tadmitted\tcontiguous\trate\tvs bound\t%s\tmean arc\tutil\tarc found\t\n", nonContig)
	for _, c := range cases {
		b := c.Bound()
		for _, r := range c.Results {
			found := "-"
			if r.ArcFree > 0 {
				found = fmt.Sprintf("%.2f%%", 100*ratio(r.ContiguousWhenArcFree, r.ArcFree))
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%.2f%%\t%.2f%%\t%d\t%.2f\t%.0f%%\t%s\t\n",
				c.Node.Name, c.Mix.Name, r.Policy, r.Admitted, r.Contiguous, 100*r.Rate(),
				100*ratio(r.Contiguous, b.Contiguous), r.NonContiguous, r.MeanLargestArc(),
				100*r.Utilisation(c.Node.Capacity()), found)
		}
	}
	return tw.Flush()
}

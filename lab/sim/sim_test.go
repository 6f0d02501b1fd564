package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/hyperaccel/lpu-node/lab/churn"
)

func smallConfig(t *testing.T) Config {
	t.Helper()
	cfg, err := parseFlags([]string{"-arrivals", "4000", "-seed", "7"})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// Every policy sees the same demand; in best-effort mode they admit the
// same jobs, and none can be contiguous more often than the count bound.
func TestCountBoundIsAnUpperBound(t *testing.T) {
	cases, err := Run(smallConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(cases) != 9 {
		t.Fatalf("got %d cases, want 3 nodes × 3 mixes", len(cases))
	}
	for _, c := range cases {
		b := c.Bound()
		if b.Policy != CountBound || b.Contiguous != b.Admitted || b.Contiguous == 0 {
			t.Fatalf("%s/%s: bad count bound row %+v", c.Node.Name, c.Mix.Name, b)
		}
		for _, r := range c.Results[1:] {
			if r.Arrivals != b.Arrivals || r.Admitted != b.Admitted {
				t.Errorf("%s/%s/%s: arrivals %d admitted %d, bound saw %d and %d",
					c.Node.Name, c.Mix.Name, r.Policy, r.Arrivals, r.Admitted, b.Arrivals, b.Admitted)
			}
			if r.Contiguous > b.Contiguous {
				t.Errorf("%s/%s/%s: %d contiguous admissions beat the count bound %d",
					c.Node.Name, c.Mix.Name, r.Policy, r.Contiguous, b.Contiguous)
			}
			if r.Contiguous+r.NonContiguous != r.Admitted {
				t.Errorf("%s/%s/%s: contiguous %d + non-contiguous %d != admitted %d",
					c.Node.Name, c.Mix.Name, r.Policy, r.Contiguous, r.NonContiguous, r.Admitted)
			}
		}
	}
}

// In strict mode nothing non-contiguous is admitted.
func TestStrictAdmitsOnlyContiguous(t *testing.T) {
	cfg := smallConfig(t)
	cfg.Strict = true
	cases, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		for _, r := range c.Results {
			if r.Admitted != r.Contiguous {
				t.Errorf("%s/%s/%s: admitted %d but only %d contiguous", c.Node.Name, c.Mix.Name, r.Policy, r.Admitted, r.Contiguous)
			}
		}
	}
}

// Two runs with the same flags write the same bytes.
func TestReproducible(t *testing.T) {
	var outs [2]string
	for i := range outs {
		outs[i] = t.TempDir()
		args := []string{"-arrivals", "3000", "-seed", "11", "-out", outs[i]}
		if err := run(args, io.Discard); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"results.csv", "sizes.csv", "rates.svg"} {
		a, err := os.ReadFile(filepath.Join(outs[0], name))
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(outs[1], name))
		if err != nil {
			t.Fatal(err)
		}
		if len(a) == 0 || !bytes.Equal(a, b) {
			t.Errorf("%s differs between two runs with the same seed (%d vs %d bytes)", name, len(a), len(b))
		}
	}
	csv, _ := os.ReadFile(filepath.Join(outs[0], "results.csv"))
	if got := strings.Count(string(csv), "\n"); got != 1+9*4 {
		t.Errorf("results.csv has %d lines, want header + 36 rows", got)
	}
}

func TestGenerate(t *testing.T) {
	a := churn.Generate(3, churn.MixDefault, 20000, 0.9, 8)
	b := churn.Generate(3, churn.MixDefault, 20000, 0.9, 8)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("same seed, different jobs")
	}
	if reflect.DeepEqual(a, churn.Generate(4, churn.MixDefault, 20000, 0.9, 8)) {
		t.Fatal("different seeds, same jobs")
	}
	count := map[int]int{}
	for i, j := range a {
		count[j.Size]++
		if j.End <= j.Arrive || (i > 0 && j.Arrive < a[i-1].Arrive) {
			t.Fatalf("job %d: %+v out of order or without lifetime", i, j)
		}
	}
	// Weights 40:30:20:10 within 2 percentage points.
	for k, s := range churn.MixDefault.Sizes {
		want := float64(churn.MixDefault.Weights[k]) / 100
		if got := float64(count[s]) / float64(len(a)); got < want-0.02 || got > want+0.02 {
			t.Errorf("size %d: share %.3f, want %.2f", s, got, want)
		}
	}
	// Offered load: rate × mean size / capacity ≈ 0.9.
	rate := float64(len(a)) / a[len(a)-1].Arrive
	if load := rate * churn.MixDefault.Mean() / 8; load < 0.85 || load > 0.95 {
		t.Errorf("offered load %.3f, want 0.9", load)
	}
}

func TestPolicies(t *testing.T) {
	node, err := ParseNode("1x8")
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		policy    Policy
		available []string
		size      int
		want      []string // nil: only check validity
	}{
		"first-fit lowest arc":        {policy: firstFit{node: node}, available: []string{"lpu1", "lpu3", "lpu4", "lpu5"}, size: 2, want: []string{"lpu3", "lpu4"}},
		"first-fit wrap arc":          {policy: firstFit{node: node}, available: []string{"lpu0", "lpu2", "lpu7"}, size: 2, want: []string{"lpu7", "lpu0"}},
		"first-fit no arc":            {policy: firstFit{node: node}, available: []string{"lpu1", "lpu3", "lpu5"}, size: 2, want: []string{"lpu1", "lpu3"}},
		"first-fit too big":           {policy: firstFit{node: node}, available: []string{"lpu1"}, size: 2, want: nil},
		"kubelet picks from the set":  {policy: newKubeletDefault(1), available: []string{"lpu1", "lpu3", "lpu4", "lpu6", "lpu7"}, size: 3},
		"kubelet takes all when full": {policy: newKubeletDefault(1), available: []string{"lpu2", "lpu5"}, size: 2},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := tc.policy.Pick(tc.available, tc.size)
			if tc.want != nil || tc.size > len(tc.available) {
				if !reflect.DeepEqual(got, tc.want) {
					t.Fatalf("Pick = %v, want %v", got, tc.want)
				}
				return
			}
			if len(got) != tc.size {
				t.Fatalf("Pick = %v, want %d devices", got, tc.size)
			}
			seen := map[string]bool{}
			for _, id := range got {
				if !slices.Contains(tc.available, id) || seen[id] {
					t.Fatalf("Pick = %v: %s not available or repeated", got, id)
				}
				seen[id] = true
			}
		})
	}
}

func TestParse(t *testing.T) {
	tests := map[string]struct {
		args    []string
		wantErr string
	}{
		"defaults":        {},
		"custom mix":      {args: []string{"-mix", "1:50,3:50 default"}},
		"bad mix entry":   {args: []string{"-mix", "1-50"}, wantErr: `entry "1-50" is not size:weight`},
		"bad size":        {args: []string{"-mix", "0:5"}, wantErr: `size "0"`},
		"bad weight":      {args: []string{"-mix", "2:x"}, wantErr: `weight "x"`},
		"bad node":        {args: []string{"-node", "8"}, wantErr: `node "8"`},
		"huge node":       {args: []string{"-node", "64x64"}, wantErr: `node "64x64"`},
		"bad load":        {args: []string{"-load", "0"}, wantErr: "-load 0"},
		"bad arrivals":    {args: []string{"-arrivals", "0"}, wantErr: "-arrivals 0"},
		"empty node list": {args: []string{"-node", " "}, wantErr: "at least one"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := parseFlags(tc.args)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
			}
		})
	}
}

// A request larger than the node is a configuration error, not a panic.
func TestSizeLargerThanNode(t *testing.T) {
	cfg := smallConfig(t)
	cfg.Mixes = []churn.Mix{{Name: "huge", Sizes: []int{16}, Weights: []int{1}}}
	if _, err := Run(cfg); err == nil || !strings.Contains(err.Error(), "size 16 exceeds") {
		t.Fatalf("err = %v, want size 16 exceeds", err)
	}
}

// The ablation's brute-force CLSAP scores like pkg/alloc, so the ablation
// table compares like with like.
func TestAblationMatchesPkgAlloc(t *testing.T) {
	for _, shape := range []string{"1x8", "2x8"} {
		node, err := ParseNode(shape)
		if err != nil {
			t.Fatal(err)
		}
		ps, err := Policies(node, churn.MixDefault, 1, "CLSAP")
		if err != nil {
			t.Fatal(err)
		}
		jobs := churn.Generate(5, churn.MixDefault, 3000, 0.9, node.Capacity())
		var got []Result
		for _, p := range ps[2:] { // pkg/alloc, v:CLSAP
			r, err := Simulate(node, jobs, p, false)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, r)
		}
		if len(got) != 2 || got[1].Policy != "v:CLSAP" {
			t.Fatalf("%s: policies %v, want pkg/alloc and v:CLSAP", shape, ps)
		}
		a, b := got[0], got[1]
		if a.Contiguous != b.Contiguous || a.NonContiguous != b.NonContiguous || a.SumLargestArc != b.SumLargestArc {
			t.Errorf("%s: pkg/alloc %d/%d/%.0f, brute-force CLSAP %d/%d/%.0f (contiguous/non-contiguous/arc sum)",
				shape, a.Contiguous, a.NonContiguous, a.SumLargestArc, b.Contiguous, b.NonContiguous, b.SumLargestArc)
		}
	}
}

// The DRA allocator on the dynamically republished order does what
// pkg/alloc does within the target; the static order does worse.
func TestDRAOrder(t *testing.T) {
	cases, err := Run(Config{Arrivals: 20_000, Seed: 1, Load: 0.9, DRA: true,
		Nodes: []Node{{Name: "1x8", Rings: [][]string{{"lpu0", "lpu1", "lpu2", "lpu3", "lpu4", "lpu5", "lpu6", "lpu7"}}}},
		Mixes: []churn.Mix{churn.MixDefault}})
	if err != nil {
		t.Fatal(err)
	}
	c := cases[0]
	bound := float64(c.Bound().Contiguous)
	got := map[string]float64{}
	for _, r := range c.Results {
		got[r.Policy] = float64(r.Contiguous) / bound
	}
	if got["dra-dynamic"] < 0.985 || got["dra-dynamic"] <= got["dra-static"] {
		t.Fatalf("contiguous vs bound: dynamic %.4f, static %.4f; want dynamic ≥ 0.985 and above static", got["dra-dynamic"], got["dra-static"])
	}
}

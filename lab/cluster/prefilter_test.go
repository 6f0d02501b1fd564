package main

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/hyperaccel/lpu-node/pkg/alloc"
	"github.com/hyperaccel/lpu-node/pkg/arcslice"
	"github.com/hyperaccel/lpu-node/pkg/nodelabel"
)

// Arm names: a base arm, then -prefilter, then -proto; the variants keep
// the base arm's way of serving and run in the order given, beside the
// base arms, in one run.
func TestArmVariants(t *testing.T) {
	c, err := parseFlags([]string{"-arms", "dra-dynamic, dra-dynamic-prefilter,dra-best-effort-prefilter-proto,dp-least-proto,gang-on-prefilter",
		"-proto-scheduler", "/bin/true", "-coalesce", "150ms"})
	if err != nil {
		t.Fatal(err)
	}
	type view struct {
		name                                 string
		dynamic, bestEffort, prefilter, prot bool
		gang                                 string
	}
	var got []view
	for _, a := range c.Arms {
		got = append(got, view{a.name, a.dynamic, a.bestEffort, a.prefilter, a.proto, a.gang})
	}
	want := []view{
		{"dra-dynamic", true, false, false, false, ""},
		{"dra-dynamic-prefilter", true, false, true, false, ""},
		{"dra-best-effort-prefilter-proto", true, true, true, true, ""},
		{"dp-least-proto", false, false, false, true, ""},
		{"gang-on-prefilter", true, false, true, false, "on"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("arms\n%+v\nwant\n%+v", got, want)
	}
	if c.Coalesce != 150*time.Millisecond || c.ProtoScheduler != "/bin/true" {
		t.Errorf("-coalesce %v, -proto-scheduler %q", c.Coalesce, c.ProtoScheduler)
	}
	if !c.gangs() {
		t.Error("gang-on-prefilter does not turn the Workload API on")
	}
	// A variant's pods are labelled with its own name: arms' pods never mix.
	if p := c.Arms[1].pod("x", 4); p.Labels["arm"] != "dra-dynamic-prefilter" || *p.Spec.ResourceClaims[0].ResourceClaimTemplateName != "lpu-arc-4" {
		t.Errorf("prefilter arm's pod: labels %v, claims %+v", p.Labels, p.Spec.ResourceClaims)
	}
	all, err := parseFlags(nil)
	if err != nil || len(all.Arms) != len(allArms) || slices.ContainsFunc(all.Arms, func(a armSpec) bool { return a.prefilter || a.proto }) {
		t.Errorf("default arms %+v (%v), want allArms without variants", all.Arms, err)
	}
}

// recorder is a node's slice publisher that keeps what it was given.
type recorder struct {
	mu   sync.Mutex
	pubs [][]resourceslice.Slice
}

func (p *recorder) Update(r *resourceslice.DriverResources) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pool := range r.Pools {
		p.pubs = append(p.pubs, pool.Slices)
	}
}
func (p *recorder) Stop()                         {}
func (p *recorder) GetStats() resourceslice.Stats { return resourceslice.Stats{} }

func (p *recorder) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.pubs)
}

// With -coalesce, changes within the window after the first one are
// published once, from the state at the window's end, and the labels
// are Set from the same view; without it, every change is published at
// once.
func TestCoalesce(t *testing.T) {
	for name, tc := range map[string]struct {
		window time.Duration
		pubs   int
	}{"off": {0, 3}, "150ms": {150 * time.Millisecond, 2}} {
		t.Run(name, func(t *testing.T) {
			g := newLoopRig(t, armSpec{name: "t", dra: true, dynamic: true, prefilter: true, profile: profileDefault})
			rec := &recorder{}
			g.node.ctrl = rec
			g.node.labels = nodelabel.New(nodelabel.Options{Client: fake.NewClientset(), Node: g.node.name})
			g.r.coalesce = tc.window
			hold := func(arc alloc.Arc) {
				g.send(event{kind: "call", fn: func() {
					for _, id := range g.node.layout.ArcIDs(arc) {
						g.r.held["dra"][g.node.name][id] = true
					}
					g.r.arcs[g.node.name] = map[string][]alloc.Arc{"p" + arcslice.DeviceName(arc): {arc}}
					g.r.republish(context.Background(), g.node)
				}})
			}
			hold(alloc.Arc{Ring: 0, Start: 0, Size: 4})
			hold(alloc.Arc{Ring: 0, Start: 4, Size: 2})
			if tc.window > 0 && rec.count() != 0 {
				t.Fatalf("published %d times within the window", rec.count())
			}
			time.Sleep(tc.window + 200*time.Millisecond)
			hold(alloc.Arc{Ring: 0, Start: 6, Size: 1})
			time.Sleep(tc.window + 200*time.Millisecond)
			g.send(event{kind: "sync"})
			if got := rec.count(); got != tc.pubs {
				t.Fatalf("%d publications, want %d", got, tc.pubs)
			}
			// The last publication and the labels are of the last state:
			// lpu7 free, so an arc of 1 and 1 LPU.
			want := arcslice.Free{Arc: 1, LPUs: 1}
			if g.node.labelled != want {
				t.Errorf("labels Set to %+v, want %+v", g.node.labelled, want)
			}
			g.send(event{kind: "call", fn: func() {
				if len(g.r.due) != 0 {
					t.Errorf("republishes still due: %v", g.r.due)
				}
			}})
		})
	}
}

// Only a required node affinity on a prefilter label counts.
func TestHasPrefilterAffinity(t *testing.T) {
	pod := func(key string, preferred bool) *corev1.Pod {
		term := corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: key, Operator: corev1.NodeSelectorOpNotIn, Values: []string{"0", "1"}}}}
		na := &corev1.NodeAffinity{}
		if preferred {
			na.PreferredDuringSchedulingIgnoredDuringExecution = []corev1.PreferredSchedulingTerm{{Weight: 1, Preference: term}}
		} else {
			na.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{term}}
		}
		return &corev1.Pod{Spec: corev1.PodSpec{Affinity: &corev1.Affinity{NodeAffinity: na}}}
	}
	for name, tc := range map[string]struct {
		p    *corev1.Pod
		want bool
	}{
		"arc label":       {pod(arcslice.LabelLargestFreeArc, false), true},
		"free-lpus label": {pod(arcslice.LabelFreeLPUs, false), true},
		"other label":     {pod("kubernetes.io/hostname", false), false},
		"preferred":       {pod(arcslice.LabelLargestFreeArc, true), false},
		"no affinity":     {&corev1.Pod{}, false},
	} {
		if got := hasPrefilterAffinity(tc.p); got != tc.want {
			t.Errorf("%s: %v, want %v", name, got, tc.want)
		}
	}
}

// The prefilter columns: label writes and settle time in prefilter arms
// only (empty cells elsewhere), pods created and given the affinity in
// every arm, the harness's CPU and the run's coalesce window.
func TestPrefilterColumns(t *testing.T) {
	on := row{Arm: "dra-dynamic-prefilter", Side: "dra", Prefilter: true, LabelWrites: 412, LabelSettle: 5.25, Created: 90, WithAffinity: 90, HarnessCPUPer1k: 3.5, HarnessRSS: 96}
	off := row{Arm: "dra-dynamic", Side: "dra", LabelWrites: 0, Created: 90}
	res := &results{Nodes: 10, Coalesce: 150 * time.Millisecond, Rows: []row{on, off}}
	rows := res.csvRows()
	cell := func(r []string, name string) string { return csvCell(t, r, name) }
	for name, want := range map[string][2]string{
		"node_label_writes":            {"412", ""},
		"node_label_settle_s":          {"5.25", ""},
		"pods_created":                 {"90", "90"},
		"pods_with_prefilter_affinity": {"90", "0"},
		"harness_cpu_s_per_1k_pods":    {"3.5", "0.0"},
		"harness_rss_mib":              {"96", "0"},
		"coalesce_ms":                  {"150", "150"},
	} {
		if got := [2]string{cell(rows[0], name), cell(rows[1], name)}; got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	tb := table(config{}, res)
	if !strings.Contains(tb, "| node-label writes |") || !strings.Contains(tb, "| 412 |") || !strings.Contains(tb, "| - |") || !strings.Contains(tb, "coalesce 150ms") {
		t.Errorf("table lacks the label writes or the window:\n%s", tb)
	}
}

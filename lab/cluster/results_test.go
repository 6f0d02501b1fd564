package main

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// A pod's wait splits into claim, bind and admit legs at its marks; a
// mark not seen or out of order moves to its neighbour, so every leg is
// ≥ 0 and the legs add up to the wait.
func TestLegsOf(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	for _, c := range []struct {
		name                     string
		rec                      podRec
		claim, bind, admit, want float64
	}{
		{"dra", podRec{created: t0, claimedAt: at(200), boundAt: at(500), started: at(600)}, 0.2, 0.3, 0.1, 0.6},
		{"count pod: claimed at its creation", podRec{created: t0, claimedAt: t0, boundAt: at(40), started: at(50)}, 0, 0.04, 0.01, 0.05},
		{"no marks: all admit", podRec{created: t0, started: at(300)}, 0, 0, 0.3, 0.3},
		{"no bind mark", podRec{created: t0, claimedAt: at(100), started: at(300)}, 0.1, 0, 0.2, 0.3},
		{"bound before claimed", podRec{created: t0, claimedAt: at(200), boundAt: at(100), started: at(300)}, 0.2, 0, 0.1, 0.3},
		{"claimed before created", podRec{created: t0, claimedAt: at(-50), boundAt: at(100), started: at(300)}, 0, 0.1, 0.2, 0.3},
		{"marks after the start", podRec{created: t0, claimedAt: at(400), boundAt: at(500), started: at(300)}, 0.3, 0, 0, 0.3},
	} {
		l := legsOf(c.rec)
		near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
		if !near(l.Claim, c.claim) || !near(l.Bind, c.bind) || !near(l.Admit, c.admit) || !near(l.Total, c.want) {
			t.Errorf("%s: legs %+v, want claim %g bind %g admit %g total %g", c.name, l, c.claim, c.bind, c.admit, c.want)
		}
		if l.Claim < 0 || l.Bind < 0 || l.Admit < 0 || !near(l.Claim+l.Bind+l.Admit, l.Total) {
			t.Errorf("%s: legs %+v negative or not adding up", c.name, l)
		}
	}
}

// tally takes the legs of the started multi-LPU pods only, their p50s
// land in the row, the CSV (the column names, after the older
// columns) and the table.
func TestTallyLegColumns(t *testing.T) {
	t0 := time.Now()
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	frozen := map[string]podRec{
		// started multi-LPU pods: claim legs 0.1, 0.2, 0.3; bind 0.5, 0.4, 0.6; admit 0.01, 0.03, 0.02
		"a": {size: 2, created: t0, claimedAt: ms(100), boundAt: ms(600), started: ms(610), contig: map[string]bool{"dra": true}},
		"b": {size: 4, created: t0, claimedAt: ms(200), boundAt: ms(600), started: ms(630), contig: map[string]bool{"dra": true}},
		"c": {size: 8, created: t0, claimedAt: ms(300), boundAt: ms(900), started: ms(920), contig: map[string]bool{"dra": true}},
		// not counted: a single, a pod still waiting, a refused one
		"d": {size: 1, created: t0, claimedAt: ms(5000), boundAt: ms(6000), started: ms(7000)},
		"e": {size: 2, created: t0, claimedAt: ms(5000)},
		"f": {size: 2, created: t0, refused: true},
	}
	var w row
	w.Arm, w.Side = "dra-dynamic", "dra"
	w.tally(frozen, "dra")
	if w.Multi != 5 || w.Contiguous != 3 || w.Waiting != 1 || w.Refused != 1 || len(w.Legs) != 3 {
		t.Fatalf("tally: %+v", w)
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	if !near(w.WaitClaimP50, 0.2) || !near(w.WaitBindP50, 0.5) || !near(w.WaitAdmitP50, 0.02) || !near(w.WaitP50, 0.63) {
		t.Errorf("p50 claim/bind/admit/wait %g/%g/%g/%g, want 0.2/0.5/0.02/0.63", w.WaitClaimP50, w.WaitBindP50, w.WaitAdmitP50, w.WaitP50)
	}

	// The older columns stay where they were.
	old := strings.Split("nodes,two_ring_nodes,arm,node_side,multi_arrivals,contiguous,contiguous_share,share_of_bound,scattered,refused,waiting_at_end,wait_p50_s,wait_p99_s,burst_pods_per_s,sched_latency_p50_ms,sched_latency_p99_ms,apiserver_cpu_s_per_1k_pods,scheduler_cpu_s_per_1k_pods,apiserver_rss_mib,scheduler_rss_mib,resourceslices,resourceslice_bytes,resourceslice_writes,harness_errors", ",")
	if !slices.Equal(csvHeader[:len(old)], old) {
		t.Errorf("CSV header %v does not start with the older columns %v", csvHeader, old)
	}
	none := row{Arm: "dp-least", Side: "pkg/alloc"}
	none.tally(map[string]podRec{"w": {size: 2, created: t0}}, "pkg/alloc")
	res := &results{Nodes: 10, Multi: 5, Bound: 5, Rows: []row{w, none}}
	rows := res.csvRows()
	col := func(r []string, name string) string { return csvCell(t, r, name) }
	for name, want := range map[string]string{"wait_claim_p50_s": "0.200", "wait_bind_p50_s": "0.500", "wait_admit_p50_s": "0.020", "wait_p50_s": "0.63"} {
		if got := col(rows[0], name); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
		// No pod started: no p50, an empty cell.
		if got := col(rows[1], name); got != "" {
			t.Errorf("%s with no pod started = %q, want empty", name, got)
		}
	}
	if tb := table(config{}, res); !strings.Contains(tb, "wait legs p50 claim / bind / admit s") || !strings.Contains(tb, "| 0.63 / 0.92 | 0.200 / 0.500 / 0.020 |") {
		t.Errorf("table lacks the legs:\n%s", tb)
	}
}

func TestPercentile(t *testing.T) {
	if !math.IsNaN(percentile(nil, 0.5)) {
		t.Error("percentile of nothing is not NaN")
	}
	v := []float64{0.3, 0.1, 0.4, 0.2}
	for q, want := range map[float64]float64{0.5: 0.2, 0.99: 0.4, 0.25: 0.1, 0: 0.1} {
		if got := percentile(v, q); got != want {
			t.Errorf("p%g of %v = %g, want %g", 100*q, v, got, want)
		}
	}
	if v[0] != 0.3 {
		t.Error("percentile sorted its input")
	}
}

// csvCell is the cell of CSV row r in the column named name.
func csvCell(t *testing.T, r []string, name string) string {
	t.Helper()
	i := slices.Index(csvHeader, name)
	if i < 0 || len(r) != len(csvHeader) {
		t.Fatalf("column %s: header %v, row %v", name, csvHeader, r)
	}
	return r[i]
}

// The run's chart is SVG with the count bound first, then one bar per
// row in the row's colour, labelled with its arm and node side on their
// own lines ("kubelet" for kubelet-default) and its share of contiguous
// starts.
func TestChart(t *testing.T) {
	res := &results{Nodes: 10, Pods: 100, Multi: 40, Bound: 38, Rows: []row{
		{Arm: "dra-dynamic", Side: "dra", Multi: 40, Contiguous: 38},
		{Arm: "dp-least", Side: "pkg/alloc", Multi: 40, Contiguous: 36},
		{Arm: "dp-least", Side: "kubelet-default", Multi: 40, Contiguous: 11},
		{Arm: "dra-static", Side: "dra"}, // no multi-LPU arrival: no value
	}}
	path := filepath.Join(t.TempDir(), "cluster-10.svg")
	var b strings.Builder
	if err := chart(&b, config{Seed: 3, Load: 0.9}, res); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	texts := svgTexts(t, path)
	for _, want := range []string{"Contiguous starts per multi-LPU arrival (%)", "10 nodes, 100 arrivals, seed 3, load 0.90, real kube-scheduler 1.37.2",
		"bound", "dra-dynamic", "dp-least", "pkg/alloc", "kubelet", "95.0", "90.0", "27.5", "n/a",
		"bound: 95.0", "dra-dynamic: 95.0", "dp-least, pkg/alloc: 90.0", "dp-least, kubelet: 27.5", "dra-static: n/a"} {
		if !slices.Contains(texts, want) {
			t.Errorf("no text %q in %q", want, texts)
		}
	}
	fills := regexp.MustCompile(`class="bar"[^>]* fill="(#[0-9a-f]{6})"`).FindAllStringSubmatch(b.String(), -1)
	var got []string
	for _, m := range fills {
		got = append(got, m[1])
	}
	if want := []string{"#969696", "#2166ac", "#f4a53c", "#d6604d", "#2166ac"}; !slices.Equal(got, want) {
		t.Errorf("bar colours %q, want %q", got, want)
	}
}

// svgTexts reads the SVG at path with encoding/xml, failing the test if
// it is not well-formed, and returns the character data of its elements
// (texts and bar titles), trimmed, in order.
func svgTexts(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	d := xml.NewDecoder(bytes.NewReader(data))
	var out []string
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("%s is not well-formed XML: %v", path, err)
		}
		if c, ok := tok.(xml.CharData); ok && strings.TrimSpace(string(c)) != "" {
			out = append(out, strings.TrimSpace(string(c)))
		}
	}
}

package main

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hyperaccel/lpu-node/lab/churn"
)

func TestParseGangMix(t *testing.T) {
	got, err := parseGangMix("2x8, 4x4,2x4,2x4m3")
	if err != nil || len(got) != 4 || got[0] != (gangShape{Pods: 2, Size: 8}) || got[1] != (gangShape{Pods: 4, Size: 4}) || got[2].String() != "2x4" ||
		got[3] != (gangShape{Pods: 2, Size: 4, Min: 3}) || got[3].String() != "2x4m3" || got[3].minCount() != 3 || got[0].minCount() != 2 {
		t.Fatalf("%v %v", got, err)
	}
	for _, bad := range []string{"", "1x8", "2x0", "2*8", "x8", "2x", "axb", "2x8,", "2x4m", "2x4m0", "2x4mx"} {
		if _, err := parseGangMix(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// The same seed gives every arm the same gangs; about share of the
// arrivals are gangs, every shape of the mix drawn.
func TestGangWorkload(t *testing.T) {
	jobs := churn.Generate(1, churn.MixDefault, 2000, 0.9, 800)
	a := gangWorkload(7, jobs, 0.3, defaultGangMix)
	b := gangWorkload(7, jobs, 0.3, defaultGangMix)
	seen := map[gangShape]int{}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("arrival %d: %v then %v with one seed", i, a[i], b[i])
		}
		if a[i].Pods > 0 {
			seen[a[i]]++
		}
	}
	total := seen[defaultGangMix[0]] + seen[defaultGangMix[1]] + seen[defaultGangMix[2]]
	if share := float64(total) / float64(len(jobs)); math.Abs(share-0.3) > 0.04 || len(seen) != 3 {
		t.Fatalf("gang share %.3f, shapes %v", share, seen)
	}
	for _, s := range gangWorkload(7, jobs, 0, defaultGangMix) {
		if s.Pods != 0 {
			t.Fatal("share 0 made a gang")
		}
	}
}

// A gang bound in one round holds nothing partially; one whose second pod
// came 5 s after the first held the first's LPUs 5 s; one never whole is
// a deadlock holding its started pods' LPUs until the end; a gang with no
// pod bound is a deadlock holding nothing.
func TestTallyGangs(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 6, 0, 0, 0, time.UTC)
	end := t0.Add(20 * time.Second)
	frozen := map[string]podRec{}
	bound := map[string]time.Time{}
	gang := func(name string, size int, created time.Time, at ...time.Duration) gangRec {
		g := gangRec{name: name, shape: gangShape{Pods: 2, Size: size}, created: created}
		for i := 0; i < 2; i++ {
			m := name + "-" + string(rune('0'+i))
			g.members = append(g.members, m)
			rec := podRec{size: size, contig: map[string]bool{"dra": true}}
			if i < len(at) {
				bound[m] = t0.Add(at[i])
				rec.started = bound[m]
			}
			frozen[m] = rec
		}
		return g
	}
	gangs := []gangRec{
		gang("round", 8, t0.Add(-2*time.Second), 0, time.Second), // one bind round: the second's clock ticked
		gang("late", 4, t0, 0, 5*time.Second),
		gang("stuck", 4, t0, 10*time.Second),
		gang("none", 8, t0),
	}
	frozen["single"] = podRec{size: 2, started: t0, contig: map[string]bool{"dra": false}}
	w := tallyGangs("gang-off", "off", "dra", gangs, frozen, bound, end)
	if w.Gangs != 4 || w.Whole != 2 || w.Deadlocks != 2 {
		t.Fatalf("%+v, want 4 gangs, 2 whole, 2 deadlocks", w)
	}
	if want := 5.0*4 + 10*4; math.Abs(w.PartialHoldLPUs-want) > 1e-9 {
		t.Errorf("partial holds %.1f LPU-s, want %.1f", w.PartialHoldLPUs, want)
	}
	if w.WaitP50 != 3 || w.WaitP99 != 5 {
		t.Errorf("gang waits p50/p99 %.1f/%.1f, want 3/5", w.WaitP50, w.WaitP99)
	}
	if want := 5.0 / 6; math.Abs(w.Contiguous-want) > 1e-9 {
		t.Errorf("contiguous share %.3f, want %.3f (5 gang pods, 1 scattered single)", w.Contiguous, want)
	}
	line := strings.Join(w.csv(10), ",")
	if line != "10,gang-off,off,4,2,60.0,2,3.00,5.00,0.8333,0" || len(w.csv(10)) != len(gangCSVHeader) {
		t.Errorf("csv %s", line)
	}
}

// One CSV line and one table line per gang arm, also when a device-plugin
// arm has two node sides; a run of gang arms only leaves results-N.csv
// alone.
func TestWriteGangResults(t *testing.T) {
	on := &gangRow{Arm: "gang-on", Gate: "on", Side: "dra", Gangs: 3, Whole: 3, Contiguous: 1}
	dp := &gangRow{Arm: "gang-dp-off", Gate: "off", Side: "pkg/alloc", Gangs: 3, Whole: 1, Deadlocks: 2, Short: 1, PartialHoldLPUs: 12.5}
	res := &results{Nodes: 4, Rows: []row{{Arm: "gang-on", Side: "dra", Gang: on},
		{Arm: "gang-dp-off", Side: "pkg/alloc", Gang: dp}, {Arm: "gang-dp-off", Side: "kubelet-default", Gang: dp}}}
	cfg := config{Out: t.TempDir()}
	gangOnly, err := writeGangResults(cfg, res, "4")
	if err != nil || !gangOnly {
		t.Fatalf("gangOnly %v, %v", gangOnly, err)
	}
	b, err := os.ReadFile(outPath(cfg, "results-gang-4.csv"))
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Join(gangCSVHeader, ",") + "\n4,gang-on,on,3,3,0.0,0,0.00,0.00,1.0000,0\n4,gang-dp-off,off,3,1,12.5,2,0.00,0.00,0.0000,1\n"
	if string(b) != want {
		t.Errorf("csv:\n%s\nwant:\n%s", b, want)
	}
	if tab := gangTable(res); strings.Count(tab, "| gang-") != 2 || !strings.Contains(tab, "| gang-dp-off | off | 3 | 1 | 12.5 | 2 |") {
		t.Errorf("table:\n%s", tab)
	}
	res.Rows = append(res.Rows, row{Arm: "dra-static", Side: "dra"})
	if gangOnly, err := writeGangResults(cfg, res, "4"); err != nil || gangOnly {
		t.Errorf("with a churn arm: gangOnly %v, %v", gangOnly, err)
	}
}

// With a third of the arrivals gangs of 2x8, 4x4, 2x4 (13.3 LPUs on
// average) instead of the default mix's singles (2.6), an arrival asks
// 2.38× the LPUs, and the churn is drawn at that much less load.
func TestGangLoad(t *testing.T) {
	f := gangLoadFactor(1.0/3, defaultGangMix, churn.MixDefault)
	if want := 2.0/3 + (40.0/3)/2.6/3; math.Abs(f-want) > 1e-9 {
		t.Fatalf("factor %.4f, want %.4f", f, want)
	}
	c := config{Load: 0.9, GangShare: 1.0 / 3, GangMix: defaultGangMix, Arms: gangArms[:1]}
	if got := c.churnLoad(t.Logf); math.Abs(got-0.9/f) > 1e-9 {
		t.Errorf("churn load %.4f, want %.4f", got, 0.9/f)
	}
	c.Arms = allArms
	if got := c.churnLoad(t.Logf); got != 0.9 {
		t.Errorf("without gang arms the churn load is %.3f, want -load", got)
	}
}

// -replot draws the chart of an earlier run's gang CSV (without the later
// short_gangs column) or results CSV (the bound from share_of_bound, the
// file named -mixed for two-ring nodes) and names a bad file instead of
// drawing it.
func TestReplot(t *testing.T) {
	runHeader := strings.Join(csvHeader[:8], ",")
	dir := t.TempDir()
	good := filepath.Join(dir, "results-gang-1000.csv")
	if err := os.WriteFile(good, []byte("nodes,arm,gate,gangs,gangs_whole,partial_hold_lpu_s,deadlocks,gang_wait_p50_s,gang_wait_p99_s,contiguous_share\n"+
		"1000,gang-on,on,1181,1037,0.0,144,112.28,215.13,1.0000\n1000,gang-off,off,1181,1050,664.0,131,138.13,208.85,1.0000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	cfg, err := parseFlags([]string{"-replot", good, "-pods", "4000", "-out", out})
	if err != nil {
		t.Fatal(err)
	}
	if err := replot(cfg); err != nil {
		t.Fatal(err)
	}
	// One bar per CSV row, its arm, gate, deadlocks and partial holds
	// under it; 1037 of 1181 gangs whole is 87.8 %.
	texts := svgTexts(t, filepath.Join(out, "cluster-gang-1000.svg"))
	for _, want := range []string{"Gangs started whole (%)", "1000 nodes, 4000 arrivals, gang share 0.30, seed 1, load 0.90, real kube-scheduler 1.37.2",
		"gang-on", "gate on", "144 deadlocks", "0 LPU-s held partial", "gang-off", "664 LPU-s held partial", "87.8", "88.9",
		"gang-on, gate on, 144 deadlocks, 0 LPU-s held partial: 87.8"} {
		if !slices.Contains(texts, want) {
			t.Errorf("cluster-gang-1000.svg: no text %q in %q", want, texts)
		}
	}
	// 600 of 612 multi-LPU arrivals could start contiguous (the bound):
	// 98.0 %; dp-least's kubelet side started 111, 18.1 %.
	run := filepath.Join(dir, "results-100-mixed.csv")
	if err := os.WriteFile(run, []byte(runHeader+"\n100,20,dra-dynamic,dra,612,600,0.9804,1.0000\n100,20,dp-least,kubelet-default,612,111,0.1814,0.1850\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg.Replot, cfg.Pods = run, 1000
	if err := replot(cfg); err != nil {
		t.Fatal(err)
	}
	texts = svgTexts(t, filepath.Join(out, "cluster-100-mixed.svg"))
	for _, want := range []string{"Contiguous starts per multi-LPU arrival (%)", "100 nodes, 1000 arrivals, seed 1, load 0.90, real kube-scheduler 1.37.2",
		"bound: 98.0", "dra-dynamic: 98.0", "dp-least, kubelet: 18.1"} {
		if !slices.Contains(texts, want) {
			t.Errorf("cluster-100-mixed.svg: no text %q in %q", want, texts)
		}
	}
	for name, body := range map[string]string{
		"empty":       "",
		"header only": "nodes,arm,gate,gangs,gangs_whole,partial_hold_lpu_s,deadlocks\n",
		"other csv":   "nodes,arm,contiguous\n1000,x,1\n",
		"wide":        strings.Repeat("nodes,", 20) + "x\n" + strings.Repeat("1,", 20) + "1\n",
		"bad number":  "nodes,arm,gate,gangs,gangs_whole,partial_hold_lpu_s,deadlocks\n1000,a,on,many,1,0,0\n",
		"bad run":     runHeader + "\n100,0,a,dra,many,1,1,1\n",
		"run header":  runHeader + "\n",
	} {
		path := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".csv")
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		cfg.Replot = path
		if err := replot(cfg); err == nil || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: err = %v, want one naming %s", name, err, path)
		}
	}
}

package main

import (
	"context"
	"encoding/csv"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hyperaccel/lpu-node/internal/clustertest"
)

// TestGangSmoke runs TestSmoke's gang arm alone (LPU_CLUSTER_SMOKE=1 and
// the control-plane binaries, as TestSmoke).
func TestGangSmoke(t *testing.T) {
	if os.Getenv("LPU_CLUSTER_SMOKE") != "1" {
		t.Skip("set LPU_CLUSTER_SMOKE=1 to run the gang arms' cluster smoke")
	}
	if _, err := clustertest.FindBinaries(); err != nil {
		t.Skip(err)
	}
	smokeGang(t)
}

// smokeGang is TestSmoke's gang arm: 6 nodes, a third of a short churn's
// arrivals gangs of the default mix, offered twice what fits (-load 1.8,
// so that gangs contend), a quarter of them asking for minCount 3 of 2
// pods (bad input: never whole, a deadlock, never a harness error), with
// the Workload API (gang-on) and
// without a group (gang-off). With the gate on no gang may hold LPUs
// while a sibling is not bound, and every pod is on a contiguous arc;
// gangs are whole or counted as deadlocks, never lost; the CSV has the
// issue's columns.
func smokeGang(t *testing.T) {
	out := t.TempDir()
	t.Setenv("LPU_CLUSTER_STATE", filepath.Join(t.TempDir(), "state.json"))
	cfg, err := parseFlags([]string{"-nodes", "6", "-pods", "40", "-unit", "3s", "-burst", "6", "-gang-share", "0.35", "-gang-mix", "2x8,4x4,2x4,2x4m3", "-load", "1.8",
		"-arms", "gang-on,gang-off", "-out", out, "-manifest", "../../deploy/manifests/lpu-node-dra.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	res, err := bench(ctx, cfg, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range res.Rows {
		g := w.Gang
		if g == nil {
			t.Fatalf("arm %s has no gang row", w.Arm)
		}
		if len(w.Errors) > 0 || len(g.Errors) > 0 {
			t.Errorf("%s: harness errors %v %v", w.Arm, w.Errors, g.Errors)
		}
		if g.Gangs == 0 || g.Whole+g.Deadlocks != g.Gangs {
			t.Errorf("%s: %d gangs, %d whole, %d deadlocks", w.Arm, g.Gangs, g.Whole, g.Deadlocks)
		}
		if g.Short == 0 {
			t.Errorf("%s: no gang of shape 2x4m3 drawn; the bad-input case went untested", w.Arm)
		}
		if g.Gate == "on" && g.Deadlocks < g.Short {
			t.Errorf("%s: %d deadlocks, but %d gangs ask for minCount 3 of 2 pods and can never be whole", w.Arm, g.Deadlocks, g.Short)
		}
		if g.Gate == "on" && (g.PartialHoldLPUs != 0 || g.Contiguous != 1) {
			t.Errorf("%s: partial holds %.1f LPU-s, contiguous share %.3f with the gate on; want 0 and 1", w.Arm, g.PartialHoldLPUs, g.Contiguous)
		}
	}
	if err := writeResults(cfg, res); err != nil {
		t.Fatal(err)
	}
	fh, err := os.Open(filepath.Join(out, "results-gang-6.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	recs, err := csv.NewReader(fh).ReadAll()
	if err != nil || len(recs) != 3 || strings.Join(recs[0], ",") != strings.Join(gangCSVHeader, ",") {
		t.Fatalf("results-gang-6.csv: %v %v", recs, err)
	}
	if texts := svgTexts(t, filepath.Join(out, "cluster-gang-6.svg")); !slices.Contains(texts, "Gangs started whole (%)") {
		t.Errorf("cluster-gang-6.svg: no title in %q", texts)
	}
	if _, err := os.Stat(filepath.Join(out, "results-6.csv")); err == nil {
		t.Error("a gang-only run wrote results-6.csv")
	}
	t.Log("\n" + strings.Join(recs[1], ",") + "\n" + strings.Join(recs[2], ","))
}

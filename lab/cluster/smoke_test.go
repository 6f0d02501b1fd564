package main

import (
	"context"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/hyperaccel/lpu-node/internal/clustertest"
	"github.com/hyperaccel/lpu-node/pkg/arcslice"
)

// TestSmoke runs every arm on 10 nodes with a short churn, and two
// prefilter arms (the second one by a restarted kube-scheduler: the stock
// binary again, standing in for -proto-scheduler's prototype), and checks
// what must hold at any scale. It needs the control-plane binaries and
// LPU_CLUSTER_SMOKE=1 (make -C lab cluster-smoke sets it), since it takes a
// few minutes.
func TestSmoke(t *testing.T) {
	if os.Getenv("LPU_CLUSTER_SMOKE") != "1" {
		t.Skip("set LPU_CLUSTER_SMOKE=1 (make -C lab cluster-smoke) to run the 10-node cluster smoke")
	}
	if _, err := clustertest.FindBinaries(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%v (build it with: bash test/e2e/tools.sh kube etcd)", err)
		}
		t.Skip(err)
	}
	t.Setenv("LPU_CLUSTER_STATE", t.TempDir()+"/state.json")
	bins, _ := clustertest.FindBinaries()
	cfg, err := parseFlags([]string{"-nodes", "10", "-two-ring", "2", "-pods", "60", "-unit", "3s", "-manifest", "../../deploy/manifests/lpu-node-dra.yaml",
		"-arms", "dra-static,dra-dynamic,dra-best-effort,dra-dynamic-prefilter,dra-best-effort-prefilter-proto,dp-least,dp-least-strict,dp-most,dp-most-strict",
		"-proto-scheduler", bins.KubeScheduler})
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]map[string]map[string]string{} // arm → node → prefilter labels at the churn's end
	// kubectl lpu, built from this tree, looks at the cluster at the end
	// of each churn.
	plugin := filepath.Join(t.TempDir(), "kubectl-lpu")
	if out, err := exec.Command("go", "build", "-o", plugin, "../../cmd/kubectl-lpu").CombinedOutput(); err != nil {
		t.Fatalf("build kubectl-lpu: %v\n%s", err, out)
	}
	seen := map[string]string{}
	cfg.inspect = func(arm, kubeconfig string) {
		var b strings.Builder
		for _, cmd := range [][]string{{"nodes"}, {"pods"}, {"nodes", "-o", "json"}} {
			out, err := exec.Command(plugin, append(cmd, "--kubeconfig", kubeconfig)...).CombinedOutput()
			if err != nil {
				t.Errorf("%s: kubectl lpu %v: %v\n%s", arm, cmd, err, out)
			}
			b.Write(out)
			b.WriteString("\n")
		}
		seen[arm] = b.String()
		labels[arm] = prefilterLabels(t, kubeconfig)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	res, err := bench(ctx, cfg, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(table(cfg, res))
	rows := map[string]row{}
	for _, w := range res.Rows {
		rows[w.name()] = w
		if len(w.Errors) > 0 {
			t.Errorf("%s: harness saw %d inconsistencies, first: %s", w.name(), len(w.Errors), w.Errors[0])
		}
		if w.Multi != res.Multi {
			t.Errorf("%s: %d multi-LPU arrivals recorded, the workload has %d", w.name(), w.Multi, res.Multi)
		}
		if w.Contiguous+w.Scattered+w.Refused+w.Waiting != w.Multi {
			t.Errorf("%s: outcomes do not add up: %+v", w.name(), w)
		}
		checkLegs(t, w)
		if w.Throughput <= 0 || w.Scheduled <= 0 {
			t.Errorf("%s: no scheduler throughput measured (%.1f pods/s, %.0f scheduled)", w.name(), w.Throughput, w.Scheduled)
		}
		switch {
		case w.Side == "dra":
			if w.Refused != 0 {
				t.Errorf("%s: %d refused at admission", w.name(), w.Refused)
			}
			// The shipped sizes 1, 2, 4, 8: a node's 25 (one ring) or 50
			// (two rings) arcs fit one device slice, its counter sets a
			// second (every arc, 114 on two rings, would take three).
			if w.Slices != 20 {
				t.Errorf("%s: %d ResourceSlices, want 20", w.name(), w.Slices)
			}
			if !w.bestEffort() && w.Scattered != 0 {
				t.Errorf("%s: %d pods started scattered", w.name(), w.Scattered)
			}
		case strings.HasSuffix(w.Arm, "-strict"):
			if w.Scattered != 0 {
				t.Errorf("%s: strict ran %d pods scattered", w.name(), w.Scattered)
			}
		default:
			if w.Refused != 0 {
				t.Errorf("%s: best-effort refused %d", w.name(), w.Refused)
			}
		}
	}
	for arm, out := range seen {
		t.Logf("kubectl lpu at the end of %s:\n%s", arm, out)
		mode := "device-plugin"
		if strings.HasPrefix(arm, "dra-") {
			mode = "dra"
		}
		for _, want := range []string{"node-0000  " + mode, "room for", `"largestFreeArc"`} {
			if !strings.Contains(out, want) {
				t.Errorf("kubectl lpu at the end of %s lacks %q", arm, want)
			}
		}
		if mode == "dra" && (!strings.Contains(out, "ring0  ") || !strings.Contains(out, "ring1  ") || !strings.Contains(out, "true")) {
			t.Errorf("kubectl lpu at the end of %s shows no rings or no contiguous pod", arm)
		}
	}
	if len(seen) != len(cfg.Arms) {
		t.Errorf("kubectl lpu ran in %d arms, want %d", len(seen), len(cfg.Arms))
	}
	for _, w := range res.Rows {
		checkPrefilter(t, w, labels[w.Arm])
	}
	if rows["dra-dynamic"].Rewrites == 0 {
		t.Error("dra-dynamic never rewrote a ResourceSlice")
	}
	if d, k := rows["dra-dynamic"], rows["dp-least+kubelet-default"]; d.Contiguous < k.Contiguous {
		t.Errorf("dra-dynamic started %d contiguous, fewer than device plugin + kubelet default (%d)", d.Contiguous, k.Contiguous)
	}
	t.Run("gang", smokeGang)
}

// checkLegs checks a row's wait legs: one per started multi-LPU pod, each
// ≥ 0 and adding up to the pod's wait; a count pod has no claim leg, a
// DRA pod's claim is seen after its creation; each leg's p50 is at most
// the wait's (a pod's leg is at most its wait).
func checkLegs(t *testing.T, w row) {
	t.Helper()
	if len(w.Legs) != w.Contiguous+w.Scattered || len(w.Legs) == 0 {
		t.Errorf("%s: legs of %d pods, %d started", w.name(), len(w.Legs), w.Contiguous+w.Scattered)
		return
	}
	claimed := 0
	for _, l := range w.Legs {
		if l.Claim < 0 || l.Bind < 0 || l.Admit < 0 || math.Abs(l.Claim+l.Bind+l.Admit-l.Total) > 1e-6 {
			t.Errorf("%s: legs %+v negative or not adding up to the wait", w.name(), l)
		}
		if l.Claim > 0 {
			claimed++
		}
	}
	switch {
	case w.Side != "dra" && (claimed != 0 || w.WaitClaimP50 != 0):
		t.Errorf("%s: count pods with a claim leg: %d, p50 %g", w.name(), claimed, w.WaitClaimP50)
	case w.Side == "dra" && claimed == 0:
		t.Errorf("%s: no DRA pod had a claim leg", w.name())
	}
	for leg, v := range map[string]float64{"claim": w.WaitClaimP50, "bind": w.WaitBindP50, "admit": w.WaitAdmitP50} {
		if !(v >= 0 && v <= w.WaitP50+1e-9) {
			t.Errorf("%s: %s leg p50 %g, wait p50 %g", w.name(), leg, v, w.WaitP50)
		}
	}
	t.Logf("%s: wait p50 %.3f s, legs p50 claim %.3f / bind %.3f / admit %.3f s over %d pods",
		w.name(), w.WaitP50, w.WaitClaimP50, w.WaitBindP50, w.WaitAdmitP50, len(w.Legs))
}

// bestEffort reports whether the row's pods may take firstAvailable's
// singles.
func (w row) bestEffort() bool { return strings.HasPrefix(w.Arm, "dra-best-effort") }

// prefilterLabels reads every node's prefilter labels through kubeconfig.
func prefilterLabels(t *testing.T, kubeconfig string) map[string]map[string]string {
	t.Helper()
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatalf("load %s: %v", kubeconfig, err)
	}
	nodes, err := kubernetes.NewForConfigOrDie(rc).CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list nodes: %v", err)
	}
	out := map[string]map[string]string{}
	for _, n := range nodes.Items {
		out[n.Name] = map[string]string{}
		for _, k := range labelKeys {
			if v, ok := n.Labels[k]; ok {
				out[n.Name][k] = v
			}
		}
	}
	return out
}

// checkPrefilter checks a row's prefilter columns and the node labels at
// its churn's end. A prefilter arm: every pod was given the policy's
// affinity, no multi-LPU pod was refused or (strict) started scattered,
// the keepers wrote labels, and the harness's own check found every
// node's labels to be the view last published (else a harness error);
// here every node has both labels, each a published size (1, 2, 4, 8) or
// 0, and some node is labelled below the empty node's 8 (the labels
// follow the churn). Any other arm: no pod got the affinity and no node
// has a label (the previous arm's policy and labels are gone).
func checkPrefilter(t *testing.T, w row, labels map[string]map[string]string) {
	t.Helper()
	if !w.Prefilter {
		if w.WithAffinity != 0 || w.Created == 0 {
			t.Errorf("%s: %d of %d pods got the prefilter affinity without the policy", w.name(), w.WithAffinity, w.Created)
		}
		for node, l := range labels {
			if len(l) != 0 {
				t.Errorf("%s: node %s has prefilter labels %v without a prefilter", w.name(), node, l)
			}
		}
		return
	}
	if w.Created == 0 || w.WithAffinity != w.Created {
		t.Errorf("%s: %d of %d pods got the prefilter affinity, want all", w.name(), w.WithAffinity, w.Created)
	}
	if w.Refused != 0 || (!w.bestEffort() && w.Scattered != 0) {
		t.Errorf("%s: contiguous %d, scattered %d, refused %d, waiting %d of %d", w.name(), w.Contiguous, w.Scattered, w.Refused, w.Waiting, w.Multi)
	}
	if w.LabelWrites == 0 || w.LabelSettle <= 0 {
		t.Errorf("%s: %d node-label writes, labels checked at the end after %g s", w.name(), w.LabelWrites, w.LabelSettle)
	}
	if len(labels) != 10 {
		t.Errorf("%s: labels of %d nodes, want 10", w.name(), len(labels))
	}
	low := 0
	for node, l := range labels {
		for _, k := range labelKeys {
			if v, ok := l[k]; !ok || !slices.Contains([]string{"0", "1", "2", "4", "8"}, v) {
				t.Errorf("%s: node %s label %s=%q, want a published size or 0", w.name(), node, k, v)
			}
		}
		if l[arcslice.LabelLargestFreeArc] != "8" {
			low++
		}
	}
	if low == 0 {
		t.Errorf("%s: every node labelled with a free 8-arc at the churn's end: %v", w.name(), labels)
	}
	t.Logf("%s: %d node-label writes, labels as published %.2f s after the churn, %d of 10 nodes below a free 8-arc, %d/%d pods with the affinity",
		w.name(), w.LabelWrites, w.LabelSettle, low, w.WithAffinity, w.Created)
}

package main

import (
	"context"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/hyperaccel/lpu-node/pkg/alloc"
)

// A hand-made ring: the fewest victims for each size, a pod that may not
// be evicted blocking its arcs, free LPUs costing nothing, and sizes past
// the ring impossible.
func TestFewestVictimsRing(t *testing.T) {
	ring := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	owner := map[string]string{"a": "p1", "b": "p1", "c": "p2", "d": "p3", "e": "p4", "f": "p4", "g": "p5", "h": "p6"}
	lower := map[string]bool{"p1": true, "p2": true, "p3": true, "p4": true, "p5": true, "p6": true}
	for _, c := range []struct {
		k, want int
	}{{1, 1}, {2, 1}, {3, 2}, {4, 3}, {8, 6}, {9, -1}} {
		if got := fewestVictims([][]string{ring}, owner, lower, c.k); got != c.want {
			t.Errorf("k=%d: %d victims, want %d", c.k, got, c.want)
		}
	}
	// p4 is high priority: e, f are out, and so is the whole ring.
	lower["p4"] = false
	if got := fewestVictims([][]string{ring}, owner, lower, 4); got != 3 {
		t.Errorf("k=4 with p4 kept: %d, want 3 (g,h,a,b or a..d)", got)
	}
	if got := fewestVictims([][]string{ring}, owner, lower, 8); got != -1 {
		t.Errorf("k=8 with p4 kept: %d, want -1", got)
	}
	// c and d free: the arc b..e needs p1 and p4, a..d p1 alone.
	delete(owner, "c")
	delete(owner, "d")
	lower["p4"] = true
	if got := fewestVictims([][]string{ring}, owner, lower, 4); got != 1 {
		t.Errorf("k=4 with c, d free: %d, want 1", got)
	}
	// The arc wraps: h, a free, g and b single pods.
	owner = map[string]string{"b": "q1", "c": "q2", "d": "q2", "e": "q3", "f": "q3", "g": "q4"}
	lower = map[string]bool{"q1": true, "q2": true, "q3": true, "q4": true}
	if got := fewestVictims([][]string{ring}, owner, lower, 4); got != 2 {
		t.Errorf("k=4 around the wrap: %d, want 2 (g,h,a,b)", got)
	}
}

// fewestVictims agrees with a brute force over every set of evictable
// pods (the smallest whose LPUs, with the free ones, hold a free k-arc,
// checked by pkg/alloc's LargestFreeArc) on random one- and two-ring
// nodes filled with 1- and 2-LPU pods, some of them not evictable.
func TestFewestVictimsBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for trial := 0; trial < 300; trial++ {
		var rings [][]string
		var all []string
		for r := 0; r < 1+trial%2; r++ {
			var ring []string
			for p := 0; p < 8; p++ {
				id := string(rune('a'+r)) + string(rune('0'+p))
				ring = append(ring, id)
				all = append(all, id)
			}
			rings = append(rings, ring)
		}
		layout, err := alloc.NewLayout(rings)
		if err != nil {
			t.Fatal(err)
		}
		owner, lower := map[string]string{}, map[string]bool{}
		pods := map[string][]string{}
		rng.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
		for i := 0; i+1 < len(all); {
			if rng.IntN(6) == 0 { // leave it free
				i++
				continue
			}
			size := 1 + rng.IntN(2)
			name := "p" + string(rune('A'+len(pods)))
			for _, id := range all[i : i+size] {
				owner[id] = name
			}
			pods[name] = all[i : i+size]
			lower[name] = rng.IntN(5) != 0
			i += size
		}
		var evictable []string
		for p := range pods {
			if lower[p] {
				evictable = append(evictable, p)
			}
		}
		for _, k := range []int{1, 2, 4, 8} {
			want := -1
			for mask := 0; mask < 1<<len(evictable); mask++ {
				n := 0
				gone := map[string]bool{}
				for i, p := range evictable {
					if mask&(1<<i) != 0 {
						gone[p] = true
						n++
					}
				}
				if want >= 0 && n >= want {
					continue
				}
				var avail []string
				for _, ring := range rings {
					for _, id := range ring {
						if p, held := owner[id]; !held || gone[p] {
							avail = append(avail, id)
						}
					}
				}
				for _, l := range layout.LargestFreeArc(avail) {
					if l >= k {
						want = n
						break
					}
				}
			}
			if got := fewestVictims(rings, owner, lower, k); got != want {
				t.Fatalf("trial %d, k=%d: %d, brute force %d (pods %v, evictable %v)", trial, k, got, want, pods, evictable)
			}
		}
	}
}

// The arm's measures from hand-made outcomes: started and contiguous,
// refusals, waits with never-started pods as +Inf, victims against the
// fewest, and victims that freed nothing (on a node where the preemptor
// then did not start on an arc: refused, started elsewhere, scattered).
func TestTallyPriority(t *testing.T) {
	inf := math.Inf(1)
	outs := []highOutcome{
		{size: 4, wait: 2, node: "n1", contig: true, victims: map[string]int{"n1": 2}, fewest: 2},
		{size: 8, wait: inf, node: "n2", refused: true, victims: map[string]int{"n2": 3}, fewest: 2},
		{size: 4, wait: 3, node: "n3", contig: true, victims: map[string]int{"n1": 1, "n3": 1}, fewest: 1},
		{size: 8, wait: inf, victims: map[string]int{}, fewest: -1},
		{size: 4, wait: 1, node: "n2", victims: map[string]int{"n2": 1}, fewest: 1},
		{size: 4, wait: 0.5, node: "n4", contig: true, fewest: 1}, // fitted without preemption
	}
	w := tallyPriority("dp", outs)
	got := []int{w.High, w.Started, w.Contiguous, w.Refused, w.Preemptions, w.Victims, w.Fewest, w.FreedNothing}
	want := []int{6, 4, 3, 1, 4, 8, 6, 5}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("high, started, contiguous, refused, preemptions, victims, fewest, freed nothing = %v, want %v", got, want)
		}
	}
	// Waits 0.5, 1, 2, 3, +Inf, +Inf: p50 the third, p99 never.
	if w.WaitP50 != 2 || !math.IsInf(w.WaitP99, 1) {
		t.Errorf("wait p50/p99 %v/%v, want 2/+Inf", w.WaitP50, w.WaitP99)
	}
	if c := waitCell(w.WaitP99, 30); c != "never within 30 s" {
		t.Errorf("p99 cell %q", c)
	}
	// DRA today: nothing starts, nothing is evicted.
	d := tallyPriority("dra", []highOutcome{{size: 4, wait: inf, fewest: 2}, {size: 8, wait: inf, fewest: 4}})
	if d.Started != 0 || d.Preemptions != 0 || d.FreedNothing != 0 || !math.IsInf(d.WaitP50, 1) || ratio(d.Victims, d.Fewest) != "" {
		t.Errorf("dra row %+v", d)
	}
}

// A running pod deleted by someone else (the scheduler's preemption) is
// an eviction: its LPUs are free again; one the harness deleted itself
// is not.
func TestEvictionFreesLPUs(t *testing.T) {
	g := newLoopRig(t, armSpec{name: "t", profile: profileDefault})
	g.r.evicting = true
	for _, name := range []string{"t-l0", "t-l1"} {
		g.add(name, 0, 2)
		p := boundPod(name)
		p.Status.ResourceClaimStatuses = nil
		g.send(event{kind: "bound", name: name, pod: p})
	}
	if n := len(g.r.held["pkg/alloc"]["node-0000"]); n != 4 {
		t.Fatalf("%d LPUs held after two 2-LPU pods, want 4", n)
	}
	g.send(event{kind: "depart", name: "t-l1"})
	g.send(event{kind: "deleted", name: "t-l1"})
	g.send(event{kind: "deleted", name: "t-l0"})
	g.send(event{kind: "deleted", name: "t-l0"}) // the final delete's event
	g.settle()
	if n := len(g.r.held["pkg/alloc"]["node-0000"]); n != 0 {
		t.Errorf("%d LPUs held after both pods went, want 0", n)
	}
	if len(g.r.evictions) != 1 || g.r.evictions[0].name != "t-l0" || g.r.evictions[0].node != "node-0000" {
		t.Errorf("evictions %+v, want t-l0 on node-0000 only", g.r.evictions)
	}
}

// -workload priority runs its own arms unless -arms is given, and
// refuses gang arms and unknown workloads.
func TestPriorityFlags(t *testing.T) {
	c, err := parseFlags([]string{"-workload", "priority", "-nodes", "6"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, a := range c.Arms {
		names = append(names, a.name)
	}
	if strings.Join(names, ",") != priorityArms || c.High != 6 {
		t.Errorf("arms %v, high %d", names, c.High)
	}
	if _, err := parseFlags([]string{"-workload", "priority", "-arms", "gang-on"}); err == nil {
		t.Error("gang arm accepted in the priority workload")
	}
	if _, err := parseFlags([]string{"-workload", "prio"}); err == nil {
		t.Error("unknown workload accepted")
	}
}

// With evicting set, the pod informer posts "deleted" when a pod is
// deleted (an immediate delete, as a grace period of 0 gives) or marked
// for deletion (a graceful one, which waits for its kubelet); without
// it, neither.
func TestWatchDeleted(t *testing.T) {
	for _, evicting := range []bool{true, false} {
		cs := fake.NewClientset()
		r := newRunner(cs, armSpec{name: "t", profile: profileDefault}, nil, time.Hour, 1, t.Logf)
		r.evicting = evicting
		ctx, cancel := context.WithCancel(context.Background())
		if err := r.watch(ctx); err != nil {
			t.Fatal(err)
		}
		now := metav1.Now()
		for _, name := range []string{"t-l0", "t-l1"} {
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: map[string]string{"arm": "t"}},
				Spec: corev1.PodSpec{NodeName: "node-0000"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
			if _, err := cs.CoreV1().Pods(namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		if err := cs.CoreV1().Pods(namespace).Delete(ctx, "t-l0", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		p, err := cs.CoreV1().Pods(namespace).Get(ctx, "t-l1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.DeletionTimestamp = &now
		if _, err := cs.CoreV1().Pods(namespace).Update(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		got := map[string]bool{}
		timeout := time.After(2 * time.Second)
	wait:
		for len(got) < 2 {
			select {
			case ev := <-r.events:
				if ev.kind != "deleted" {
					t.Fatalf("evicting %v: event %+v", evicting, ev)
				}
				got[ev.name] = true
			case <-timeout:
				break wait
			}
		}
		cancel()
		if want := evicting; got["t-l0"] != want || got["t-l1"] != want {
			t.Errorf("evicting %v: deleted events %v", evicting, got)
		}
	}
}

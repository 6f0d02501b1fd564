package nodelabel

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/hyperaccel/lpu-node/internal/clustertest"
)

const key = "lpu.hyperaccel.ai/largest-free-arc"

// due: a rise, a missing label and a non-number are written at once; a
// fall only after LowerAfter, counted from when it was first seen.
func TestDue(t *testing.T) {
	k := New(Options{Node: "n", LowerAfter: time.Second})
	t0 := time.Unix(1000, 0)
	k.Set(map[string]string{key: "4", "other": "x"})
	k.seen = map[string]string{"other": "x"}
	if p, _ := k.due(t0); len(p) != 1 || p[key] != "4" {
		t.Fatalf("missing label: patch %v, want %s=4 only", p, key)
	}
	k.seen = map[string]string{key: "2", "other": "x"}
	if p, _ := k.due(t0); p[key] != "4" {
		t.Fatalf("rise 2→4: patch %v, want it at once", p)
	}
	k.seen[key] = "bogus"
	if p, _ := k.due(t0); p[key] != "4" {
		t.Fatalf("hand-edited bogus value: patch %v, want it replaced at once", p)
	}
	k.seen[key] = "8"
	if p, wait := k.due(t0); len(p) != 0 || wait != time.Second {
		t.Fatalf("fall 8→4 at once: patch %v wait %v, want nothing for 1s", p, wait)
	}
	if p, wait := k.due(t0.Add(600 * time.Millisecond)); len(p) != 0 || wait != 400*time.Millisecond {
		t.Fatalf("fall after 0.6s: patch %v wait %v, want nothing for 0.4s more", p, wait)
	}
	if p, _ := k.due(t0.Add(time.Second)); p[key] != "4" {
		t.Fatalf("fall after 1s: patch %v, want %s=4", p, key)
	}
	// A value that rises back before its fall is due is never lowered.
	k.Set(map[string]string{key: "2"})
	k.due(t0.Add(2 * time.Second))
	k.Set(map[string]string{key: "8"})
	if p, _ := k.due(t0.Add(5 * time.Second)); len(p) != 0 {
		t.Fatalf("rose back to the Node's value: patch %v, want none", p)
	}
	k.Set(map[string]string{key: "2"})
	if p, _ := k.due(t0.Add(5500 * time.Millisecond)); len(p) != 0 {
		t.Fatalf("new fall: the old wait must not count, patch %v", p)
	}
}

// A watch event older than the patch answer already seen (it arrives
// after it) does not replace the labels: taken for a hand edit, it would
// make the keeper write the same value again.
func TestObserveKeepsTheNewerNode(t *testing.T) {
	k := New(Options{Node: "n", LowerAfter: time.Second})
	k.Set(map[string]string{key: "8"})
	node := func(rv, v string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", ResourceVersion: rv, Labels: map[string]string{key: v}}}
	}
	k.observe(node("120", "8")) // the patch's answer
	k.observe(node("119", "2")) // the watch event of the write before
	if p, _ := k.due(time.Unix(1000, 0)); len(p) != 0 {
		t.Fatalf("a stale event made the keeper write %v again", p)
	}
	k.observe(node("121", "2")) // a real hand edit after it
	if p, _ := k.due(time.Unix(1000, 0)); p[key] != "8" {
		t.Fatalf("a hand edit after the patch: patch %v, want %s=8", p, key)
	}
}

// live starts a real API server with node "n" and a Keeper on it.
func live(t *testing.T, lower time.Duration) (kubernetes.Interface, *Keeper, context.Context) {
	t.Helper()
	c := clustertest.Start(t, clustertest.Options{})
	cs := kubernetes.NewForConfigOrDie(c.Config)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	if _, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n",
		Labels: map[string]string{"kubernetes.io/hostname": "n"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	k := New(Options{Client: cs, Node: "n", LowerAfter: lower, Retry: 100 * time.Millisecond})
	done := make(chan error, 1)
	go func() { done <- k.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return cs, k, ctx
}

// label waits until node n's label is want (at most 30 s) and returns
// how long that took.
func label(ctx context.Context, t *testing.T, cs kubernetes.Interface, want string) time.Duration {
	t.Helper()
	start := time.Now()
	for deadline := start.Add(30 * time.Second); ; {
		n, err := cs.CoreV1().Nodes().Get(ctx, "n", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got, ok := n.Labels[key]; ok == (want != "") && got == want {
			if n.Labels["kubernetes.io/hostname"] != "n" {
				t.Fatalf("the keeper changed another label: %v", n.Labels)
			}
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			t.Fatalf("label %s = %q after 30 s, want %q", key, n.Labels[key], want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// writesAtLeast waits up to 5 s for the keeper to count n writes and
// returns its count: a patch is visible on the API server a moment
// before the keeper, back from the call, counts it.
func writesAtLeast(k *Keeper, n int) int {
	for deadline := time.Now().Add(5 * time.Second); k.Writes() < n && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	return k.Writes()
}

func patchLabel(ctx context.Context, t *testing.T, cs kubernetes.Interface, value *string) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]*string{key: value}}})
	if _, err := cs.CoreV1().Nodes().Patch(ctx, "n", types.MergePatchType, body, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// Against a real v1.37.2 API server: rises land at once, falls after
// LowerAfter, a fall that rises back before it is due is never written,
// and hand edits (a lower value, a deletion, a higher value) are undone.
func TestKeeperOnAPIServer(t *testing.T) {
	const lower = 1500 * time.Millisecond
	cs, k, ctx := live(t, lower)
	k.Set(map[string]string{key: "4"})
	label(ctx, t, cs, "4")
	k.Set(map[string]string{key: "8"})
	label(ctx, t, cs, "8")
	if writes := writesAtLeast(k, 2); writes != 2 {
		t.Errorf("%d writes for two rises", writes)
	}
	start := time.Now()
	k.Set(map[string]string{key: "2"})
	label(ctx, t, cs, "2")
	if took := time.Since(start); took < lower {
		t.Errorf("fall 8→2 written after %v, before LowerAfter %v", took, lower)
	}
	k.Set(map[string]string{key: "8"})
	label(ctx, t, cs, "8")
	writes := writesAtLeast(k, 4) // the two rises, the fall 8→2, the rise back
	if writes != 4 {
		t.Errorf("%d writes after two rises, a fall and a rise", writes)
	}
	k.Set(map[string]string{key: "1"})
	time.Sleep(lower / 3)
	k.Set(map[string]string{key: "8"})
	time.Sleep(lower + 500*time.Millisecond)
	if got := k.Writes(); got != writes {
		t.Errorf("a fall that rose back within LowerAfter was written (%d writes, want %d)", got, writes)
	}

	zero, high := "0", "64"
	patchLabel(ctx, t, cs, &zero)
	if took := label(ctx, t, cs, "8"); took > 10*time.Second {
		t.Errorf("hand-lowered label restored after %v", took)
	}
	patchLabel(ctx, t, cs, nil)
	label(ctx, t, cs, "8")
	patchLabel(ctx, t, cs, &high)
	label(ctx, t, cs, "8")
	if k.Disabled() != nil {
		t.Errorf("Disabled = %v", k.Disabled())
	}
}

// A token without RBAC on nodes: Run says so once, returns nil, and
// Disabled names the refusal; nothing is written.
func TestKeeperWithoutRBAC(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{})
	rc, err := c.UserConfig("no-rbac")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	k := New(Options{Client: kubernetes.NewForConfigOrDie(rc), Node: "n"})
	k.Set(map[string]string{key: "8"})
	if err := k.Run(ctx); err != nil {
		t.Fatalf("Run = %v, want nil (run on without labels)", err)
	}
	if ctx.Err() != nil {
		t.Fatal("Run kept retrying a refusal")
	}
	if k.Disabled() == nil || k.Writes() != 0 {
		t.Errorf("Disabled = %v, writes %d", k.Disabled(), k.Writes())
	}
}

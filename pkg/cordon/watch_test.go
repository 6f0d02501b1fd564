package cordon

import (
	"context"
	"encoding/json"
	"maps"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/hyperaccel/lpu-node/internal/clustertest"
)

func node(rv, value string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", ResourceVersion: rv,
		Annotations: map[string]string{Annotation: value}}}
}

// Known turns true at the first read, and an empty annotation then tells
// the change channel too (callers failing closed until then republish).
func TestKnownAtFirstRead(t *testing.T) {
	w := NewWatcher(Options{Node: "n"})
	_, ch := w.Snapshot()
	w.observe(node("5", ""))
	select {
	case <-ch:
	default:
		t.Fatal("the first read of an empty annotation did not close the change channel")
	}
	if set, _ := w.Snapshot(); !w.Known() || len(set) != 0 {
		t.Fatalf("Known %v set %v, want true and empty", w.Known(), set)
	}
}

// A stale event never replaces a newer view; a malformed value keeps the
// last good set and adds its valid entries; a fixed value replaces both.
func TestObserve(t *testing.T) {
	w := NewWatcher(Options{Node: "n"})
	_, ch := w.Snapshot()
	if w.Known() {
		t.Fatal("Known before the Node was read")
	}
	w.observe(node("10", "lpu1,lpu3"))
	if !w.Known() {
		t.Fatal("not Known after the Node was read")
	}
	set, ch2 := w.Snapshot()
	if !maps.Equal(set, map[string]bool{"lpu1": true, "lpu3": true}) {
		t.Fatalf("set %v after lpu1,lpu3", set)
	}
	select {
	case <-ch:
	default:
		t.Fatal("the change channel was not closed")
	}
	w.observe(node("9", "")) // older than what was seen
	if set, _ := w.Snapshot(); len(set) != 2 {
		t.Fatalf("a stale event replaced the set: %v", set)
	}
	w.observe(node("11", "lpu1,lpu3")) // same value: no change
	select {
	case <-ch2:
		t.Fatal("an unchanged value closed the change channel")
	default:
	}
	w.observe(node("12", "lpu5,lpuX"))
	if set, _ := w.Snapshot(); !maps.Equal(set, map[string]bool{"lpu1": true, "lpu3": true, "lpu5": true}) {
		t.Fatalf("malformed value: set %v, want the last good set plus lpu5", set)
	}
	w.observe(node("13", "lpu5"))
	if set, _ := w.Snapshot(); !maps.Equal(set, map[string]bool{"lpu5": true}) {
		t.Fatalf("fixed value: set %v, want lpu5 only", set)
	}
}

func annotate(ctx context.Context, t *testing.T, cs kubernetes.Interface, value *string) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]*string{Annotation: value}}})
	if _, err := cs.CoreV1().Nodes().Patch(ctx, "n", types.MergePatchType, body, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// wait waits up to 30 s for the watcher's set to be want.
func wait(t *testing.T, w *Watcher, want map[string]bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; {
		set, ch := w.Snapshot()
		if maps.Equal(set, want) {
			return
		}
		select {
		case <-ch:
		case <-time.After(time.Until(deadline)):
			t.Fatalf("cordoned LPUs %v after 30 s, want %v", set, want)
		}
	}
}

// Against a real API server: the annotation present before Run is read,
// patches and a deletion are followed, a malformed value fails closed.
func TestWatcherOnAPIServer(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{})
	cs := kubernetes.NewForConfigOrDie(c.Config)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := cs.CoreV1().Nodes().Create(ctx, node("", "lpu2"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "other",
		Annotations: map[string]string{Annotation: "lpu7"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w := NewWatcher(Options{Client: cs, Node: "n", Retry: 100 * time.Millisecond})
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	wait(t, w, map[string]bool{"lpu2": true})
	v := "lpu2,lpu0"
	annotate(ctx, t, cs, &v)
	wait(t, w, map[string]bool{"lpu0": true, "lpu2": true})
	v = "lpu4,bogus"
	annotate(ctx, t, cs, &v)
	wait(t, w, map[string]bool{"lpu0": true, "lpu2": true, "lpu4": true})
	annotate(ctx, t, cs, nil)
	wait(t, w, map[string]bool{})
	if w.Disabled() != nil {
		t.Errorf("Disabled = %v", w.Disabled())
	}
}

// A token without RBAC on nodes: Run returns nil, Disabled names the
// refusal, the set stays empty.
func TestWatcherWithoutRBAC(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{})
	rc, err := c.UserConfig("no-rbac")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w := NewWatcher(Options{Client: kubernetes.NewForConfigOrDie(rc), Node: "n"})
	if err := w.Run(ctx); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if w.Disabled() == nil || !w.Known() {
		t.Fatalf("after a refusal: Disabled %v, Known %v; want an error and true (no cordon to wait for)", w.Disabled(), w.Known())
	}
	if set, _ := w.Snapshot(); len(set) != 0 {
		t.Fatalf("set %v", set)
	}
}

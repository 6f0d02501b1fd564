package ledger

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// id returns a distinct allocation ID for a test.
func id(tag string, i int) string { return fmt.Sprintf("%s-%028x", tag, i) }

// TestOneTenantCannotFill is F1 of the fourth round, reproduced: one pod
// with 4,096 init containers that each request an LPU (a fresh ID each)
// and a namespace of live pods at their share must not keep another
// tenant's new LPU container out.
func TestOneTenantCannotFill(t *testing.T) {
	l, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	hog := Holder{Namespace: "evil", Pod: "hog"}
	refused := 0
	for i := range MaxEntries {
		err := l.Claim(id("hog", i), hog)
		switch {
		case err == nil:
		case errors.Is(err, ErrShare):
			refused++
		default:
			t.Fatalf("init container %d: %v", i, err)
		}
	}
	if got := len(l.byPod["hog"]); got != MaxPerPod || refused != MaxEntries-MaxPerPod {
		t.Fatalf("the pod holds %d IDs, %d refused; want %d held", got, refused, MaxPerPod)
	}
	if err := l.Claim(id("hog", 0), hog); err != nil {
		t.Errorf("the pod's own first ID (a restart) after refusals: %v", err)
	}
	// The same namespace's other pods, all live, up to the namespace's
	// share: then its next ID is refused, another namespace's is not.
	for i := 0; l.perNS["evil"] < MaxPerNamespace; i++ {
		if err := l.Claim(id("evil", i), Holder{Namespace: "evil", Pod: fmt.Sprintf("evil-%d", i/MaxPerPod)}); err != nil {
			t.Fatalf("namespace below its share, ID %d: %v", i, err)
		}
	}
	err = l.Claim(id("late", 0), Holder{Namespace: "evil", Pod: "evil-late"})
	if !errors.Is(err, ErrShare) || !strings.Contains(err.Error(), `namespace "evil"`) {
		t.Fatalf("namespace past its share: %v, want ErrShare naming it", err)
	}
	for i := range 8 {
		if err := l.Claim(id("good", i), Holder{Namespace: "good", Pod: fmt.Sprintf("good-%d", i)}); err != nil {
			t.Fatalf("another tenant's new LPU container %d: %v", i, err)
		}
	}
}

// TestNamespaceEvictsItsOwn: a namespace at its share that churns pods
// (a CI namespace keeping finished Jobs) evicts its own oldest gone IDs,
// never another namespace's, however old those are.
func TestNamespaceEvictsItsOwn(t *testing.T) {
	l, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l.now = func() time.Time { clock = clock.Add(time.Second); return clock }
	old := Holder{Namespace: "other", Pod: "old"}
	if err := l.Claim(id("other", 0), old); err != nil {
		t.Fatal(err)
	}
	l.Stopped(old.Pod, "") // the oldest evictable ID on the node
	for i := range MaxPerNamespace + 50 {
		job := Holder{Namespace: "ci", Pod: fmt.Sprintf("job-%d", i)}
		if err := l.Claim(id("ci", i), job); err != nil {
			t.Fatalf("job %d: %v", i, err)
		}
		l.Stopped(job.Pod, "") // StopPodSandbox: the Job finished, the pod is kept
	}
	if got := l.perNS["ci"]; got != MaxPerNamespace {
		t.Errorf("namespace ci holds %d IDs, want its share %d", got, MaxPerNamespace)
	}
	if _, ok := l.entries[id("other", 0)]; !ok {
		t.Error("another namespace's ID was evicted for ci's share")
	}
	if _, ok := l.entries[id("ci", 0)]; ok {
		t.Error("ci's oldest ID was kept")
	}
	if _, ok := l.entries[id("ci", MaxPerNamespace+49)]; !ok {
		t.Error("ci's newest ID was evicted")
	}
}

// TestIdleEviction: at the cap, gone pods' IDs go first, oldest first;
// idle IDs of live pods (completed init containers) go next only with
// EvictIdle; a busy ID never goes.
func TestIdleEviction(t *testing.T) {
	for _, evictIdle := range []bool{false, true} {
		t.Run(fmt.Sprint("evictIdle=", evictIdle), func(t *testing.T) {
			var opts []Option
			if evictIdle {
				opts = append(opts, EvictIdle())
			}
			l, err := Open(t.TempDir(), opts...)
			if err != nil {
				t.Fatal(err)
			}
			clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			l.now = func() time.Time { clock = clock.Add(time.Second); return clock }
			for i := range MaxEntries {
				h := Holder{Namespace: fmt.Sprintf("ns-%d", i%8), Pod: fmt.Sprintf("pod-%d", i/MaxPerPod)}
				if err := l.Claim(id("x", i), h); err != nil {
					t.Fatalf("claim %d: %v", i, err)
				}
			}
			l.Idle(id("x", 5))       // idle first, so older than the gone one
			l.Stopped("pod-100", "") // IDs 3200..3231
			for i := range MaxPerPod {
				if err := l.Claim(id("new", i), Holder{Namespace: "new", Pod: "new"}); err != nil {
					t.Fatalf("new ID %d with a gone pod's %d IDs evictable: %v", i, MaxPerPod, err)
				}
			}
			if _, ok := l.entries[id("x", 5)]; !ok {
				t.Error("an idle ID went before the gone pod's")
			}
			err = l.Claim(id("new2", 0), Holder{Namespace: "new2", Pod: "new2"})
			switch {
			case evictIdle && err != nil:
				t.Fatalf("with EvictIdle, the idle ID should make room: %v", err)
			case evictIdle:
				if _, ok := l.entries[id("x", 5)]; ok {
					t.Error("the idle ID was kept, a busy one evicted")
				}
			case !errors.Is(err, ErrFull) || !strings.Contains(err.Error(), `namespace "ns-`):
				t.Fatalf("without EvictIdle, at a ledger of busy and idle IDs: %v, want ErrFull naming the holders", err)
			}
			if _, ok := l.entries[id("x", 6)]; !ok {
				t.Error("a busy ID was evicted")
			}
		})
	}
}

// TestHolders: the biggest namespaces and pods, most first.
func TestHolders(t *testing.T) {
	l, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := l.Claim(id("a", i), Holder{Namespace: "a", Pod: "a1"}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		if err := l.Claim(id("b", i), Holder{Namespace: "b", Pod: fmt.Sprintf("b%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	nss, pods := l.Holders(2)
	if len(nss) != 2 || nss[0] != (Share{"a", 5}) || nss[1] != (Share{"b", 3}) {
		t.Errorf("namespaces %v", nss)
	}
	if len(pods) != 2 || pods[0] != (Share{"a1", 5}) || pods[1].IDs != 1 {
		t.Errorf("pods %v", pods)
	}
	if got := l.Namespaces(); got["a"] != 5 || got["b"] != 3 {
		t.Errorf("Namespaces() = %v", got)
	}
}

package plugin

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"

	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/ledger"
	"github.com/hyperaccel/lpu-node/internal/nritest"
)

// The finished pods of these tests: jobNamespaces namespaces' worth of
// pods (ledger.MaxPerNamespace each), one LPU container each, every one
// finished and kept by the kubelet (StopPodSandbox, never removed). They
// fill the ledger with ledger.MaxEntries IDs.
const jobNamespaces = ledger.MaxEntries / ledger.MaxPerNamespace

// finishedNode is a plugin with its ledger in state over a real NRI
// runtime side that lists, besides the finished pods' stopped sandboxes,
// a running pod (victim, its container running) and a crash-looping one
// (its sandbox running, its container exited: listed without it). Their
// annotations are returned for the replay checks.
type finishedNode struct {
	f              *fixture
	rt             *nritest.Runtime
	cfg            *Config // the plugin's, for a restart
	stop           func()  // the plugin's runner
	victim, looper map[string]string
}

func newFinishedNode(t *testing.T, state string) *finishedNode {
	t.Helper()
	n := &finishedNode{}
	n.f = newFixture(t, 8, false, func(c *Config) {
		l, err := ledger.Open(state)
		if err != nil {
			t.Fatal(err)
		}
		c.Ledger = l
		n.cfg = c
	})
	n.rt = nritest.New(t)
	n.rt.Start(t)
	n.stop = n.f.start(t, n.rt)
	t.Cleanup(n.stop)
	n.rt.WaitPlugins(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f, rt := n.f, n.rt

	// The two pods that run on: first in the ledger (seen longest ago), so
	// the first IDs evicted were they not live.
	victim, looper := pod("victim", nil), pod("looper", nil)
	n.victim, n.looper = seal(t, f.key, "lpu4", "lpu5"), seal(t, f.key, "lpu6")
	vc, lc := ctr("victim", n.victim), ctr("looper", n.looper)
	for _, pc := range []struct {
		p *api.PodSandbox
		c *api.Container
	}{{victim, vc}, {looper, lc}} {
		if _, err := rt.CreateContainer(ctx, pc.p, pc.c); err != nil {
			t.Fatal(err)
		}
		rt.AddPod(pc.p)
	}
	vc.State = api.ContainerState_CONTAINER_RUNNING
	rt.AddContainer(vc)
	if err := rt.StopContainer(ctx, looper, lc); err != nil { // exited, restarted later
		t.Fatal(err)
	}

	for i := range ledger.MaxEntries {
		job := &api.PodSandbox{Id: fmt.Sprintf("sandbox-job-%d", i), Name: fmt.Sprintf("job-%d", i),
			Uid: fmt.Sprintf("uid-job-%d", i), Namespace: fmt.Sprintf("ci-%d", i%jobNamespaces)}
		c := &api.Container{Id: "c-" + job.Id, PodSandboxId: job.Id, Name: "main", Annotations: seal(t, f.key, "lpu0")}
		// Some over the real runtime side, the rest to the handlers direct.
		if i%512 == 0 {
			if _, err := rt.CreateContainer(ctx, job, c); err != nil {
				t.Fatalf("job %d: %v", i, err)
			}
			if err := rt.StopPodSandbox(ctx, job); err != nil {
				t.Fatal(err)
			}
		} else {
			if _, _, err := f.p.CreateContainer(ctx, job, c); err != nil {
				t.Fatalf("job %d: %v", i, err)
			}
			if err := f.p.StopPodSandbox(ctx, job); err != nil {
				t.Fatal(err)
			}
		}
		rt.AddPod(job) // listed, stopped, without containers (exited ones are not listed)
	}
	return n
}

// reconnect restarts the runtime (containerd restarting) and waits for
// the plugin's Synchronize.
func (n *finishedNode) reconnect(t *testing.T) {
	t.Helper()
	n.rt.Stop()
	n.rt.Start(t)
	n.rt.WaitPlugins(t, 1)
}

// newAllocations creates a pod with one new allocation ID in each of the
// finished pods' namespaces and in jobNamespaces fresh ones, over the
// runtime, and returns how many were accepted and the first refusal.
func newAllocations(t *testing.T, f *fixture, rt *nritest.Runtime) (accepted, tried int, refusal error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 2 * jobNamespaces {
		ns := fmt.Sprintf("ci-%d", i%jobNamespaces)
		if i >= jobNamespaces {
			ns = fmt.Sprintf("fresh-%d", i)
		}
		p := &api.PodSandbox{Id: fmt.Sprintf("sandbox-new-%d", i), Name: fmt.Sprintf("new-%d", i), Uid: fmt.Sprintf("uid-new-%d", i), Namespace: ns}
		c := &api.Container{Id: "c-" + p.Id, PodSandboxId: p.Id, Name: "main", Annotations: seal(t, f.key, "lpu1")}
		tried++
		if _, err := rt.CreateContainer(ctx, p, c); err != nil {
			if refusal == nil {
				refusal = err
			}
			continue
		}
		accepted++
	}
	return accepted, tried, refusal
}

// checkRunningPodsKept: the running pod's and the crash-looping pod's
// annotations are still refused in another pod (their IDs were not
// evicted for the new ones), and the two pods themselves are served.
func (n *finishedNode) checkRunningPodsKept(t *testing.T, f *fixture, rt *nritest.Runtime) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for name, ann := range map[string]map[string]string{"victim": n.victim, "looper": n.looper} {
		thief := pod("thief-of-"+name, nil)
		_, err := rt.CreateContainer(ctx, thief, ctr(thief.Name, ann))
		if err == nil || !strings.Contains(err.Error(), "already used by another pod") {
			t.Errorf("%s's annotations in another pod after the reconnect: err=%v, want a refusal (its ID evicted as if it were not running)", name, err)
		}
		if _, err := rt.CreateContainer(ctx, pod(name, nil), ctr(name, ann)); err != nil {
			t.Errorf("%s's own (re)start: %v", name, err)
		}
	}
}

// TestReconnectFinishedPods is defect 2 of the fifth hardening round over
// the real NRI runtime side: with the ledger full of finished pods' IDs
// (ledger.MaxEntries, four namespaces' worth; StopPodSandbox seen, never
// removed), the runtime restarts and lists their sandboxes, stopped, at
// Synchronize. New allocations, in those namespaces and others, must be
// accepted (the finished pods' IDs evicted first), while a running pod's
// and a crash-looping pod's IDs stay theirs.
func TestReconnectFinishedPods(t *testing.T) {
	n := newFinishedNode(t, t.TempDir())
	n.reconnect(t)
	accepted, tried, refusal := newAllocations(t, n.f, n.rt)
	t.Logf("after a runtime reconnect: %d/%d new allocations accepted", accepted, tried)
	if accepted != tried {
		t.Errorf("after a runtime reconnect: %d/%d new allocations accepted (first refusal: %v); want all: the finished pods' sandboxes are stopped", accepted, tried, refusal)
	}
	n.checkRunningPodsKept(t, n.f, n.rt)
}

// TestRestartFinishedPods: what lpu-nri learnt from StopPodSandbox
// survives its own restart. The finished pods stop while lpu-nri runs;
// lpu-nri exits and starts again on the same state directory (its memory
// gone), and the runtime lists the stopped sandboxes at Synchronize: new
// allocations are accepted, the running pods' IDs stay theirs.
func TestRestartFinishedPods(t *testing.T) {
	state := t.TempDir()
	n := newFinishedNode(t, state)
	n.stop() // lpu-nri exits
	if err := n.f.p.ledger.Close(); err != nil {
		t.Fatal(err)
	}
	n.rt.WaitPlugins(t, 0)
	l, err := ledger.Open(state)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	cfg := *n.cfg
	cfg.Ledger, cfg.Metrics = l, nil
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	again := &fixture{root: n.f.root, key: n.f.key, store: n.f.store, p: p}
	again.connect(t, n.rt)
	n.rt.WaitPlugins(t, 1)
	accepted, tried, refusal := newAllocations(t, again, n.rt)
	t.Logf("after lpu-nri restarted: %d/%d new allocations accepted", accepted, tried)
	if accepted != tried {
		t.Errorf("after lpu-nri restarted: %d/%d new allocations accepted (first refusal: %v); want all: the finished pods' sandboxes stopped before the restart", accepted, tried, refusal)
	}
	n.checkRunningPodsKept(t, again, n.rt)
}

// TestOldSandboxRemovedKeepsPod: the kubelet made a pod a new sandbox
// (the old one died) and its container presented its allocation again
// there; the kubelet then removes the old sandbox. The pod still runs, so
// its ID must not be evicted at a full ledger and replayed by another pod.
func TestOldSandboxRemovedKeepsPod(t *testing.T) {
	f, rt := ledgerFixture(t, t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ann := seal(t, f.key, "lpu3")
	old := pod("web", nil)
	renewed := &api.PodSandbox{Id: "pod-web-2", Name: old.Name, Uid: old.Uid, Namespace: old.Namespace}
	if _, err := rt.CreateContainer(ctx, old, ctr("web", ann)); err != nil {
		t.Fatal(err)
	}
	if err := rt.StopPodSandbox(ctx, old); err != nil {
		t.Fatal(err)
	}
	c := ctr("web", ann)
	c.Id, c.PodSandboxId = "ctr-web-2", renewed.Id
	if _, err := rt.CreateContainer(ctx, renewed, c); err != nil {
		t.Fatalf("the pod's container in its new sandbox: %v", err)
	}
	if err := rt.RemovePodSandbox(ctx, old); err != nil { // the kubelet's garbage collection
		t.Fatal(err)
	}
	// Every other slot held by a running pod, then one more new ID.
	running := map[string]ledger.Holder{}
	for i := range ledger.MaxEntries - 1 {
		running[fmt.Sprintf("%032x", i)] = ledger.Holder{Pod: fmt.Sprintf("uid-live-%d", i)}
	}
	if _, err := f.p.ledger.Seed(running); err != nil {
		t.Fatal(err)
	}
	_, _ = rt.CreateContainer(ctx, pod("late", nil), ctr("late", seal(t, f.key, "lpu2")))
	thief := pod("thief", nil)
	_, err := rt.CreateContainer(ctx, thief, ctr("thief", ann))
	if err == nil || !strings.Contains(err.Error(), "already used by another pod") {
		t.Errorf("the running pod's annotations in another pod after its old sandbox was removed: err=%v, want \"already used by another pod\" (a \"ledger full\" means its ID was evicted as if the pod were gone)", err)
	}
}

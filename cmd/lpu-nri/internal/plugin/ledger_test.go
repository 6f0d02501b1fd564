package plugin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"

	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/ledger"
	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/verify"
	"github.com/hyperaccel/lpu-node/internal/nritest"
	"github.com/hyperaccel/lpu-node/pkg/inject"
)

// TestReplayAfterChurn is the reproduced attack on the ledger: a tenant
// churns more than ledger.MaxEntries small LPU pods (each created and
// removed) while a long-running pod holds its allocation; the victim's
// annotations copied into another pod must still be refused through the
// real NRI runtime. Then, with every slot held by a running pod, a new ID
// is refused (fail closed) and counted in lpu_nri_ledger_full_total.
func TestReplayAfterChurn(t *testing.T) {
	state := t.TempDir()
	f, rt := ledgerFixture(t, state)
	create := func(p *api.PodSandbox, c *api.Container) error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := rt.CreateContainer(ctx, p, c)
		return err
	}
	victim := pod("victim", nil)
	ann := seal(t, f.key, "lpu4", "lpu5")
	if err := create(victim, ctr("victim", ann)); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range ledger.MaxEntries + 8 {
		p := pod(fmt.Sprintf("churn-%d", i), nil)
		if _, _, err := f.p.CreateContainer(ctx, p, ctr(p.GetName(), seal(t, f.key, "lpu0"))); err != nil {
			t.Fatalf("churn pod %d: %v", i, err)
		}
		if err := f.p.RemovePodSandbox(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	thief := pod("thief", nil)
	err := create(thief, ctr("thief", ann))
	if err == nil || !strings.Contains(err.Error(), "already used by another pod") {
		t.Fatalf("replay of the long-running pod's allocation after churn: err=%v, want a refusal", err)
	}

	// Every slot taken by a running pod (the victim and these, which
	// evict the churned pods' IDs): new IDs are refused.
	// (Recorded in one append, as Synchronize seeds running containers.)
	running := map[string]ledger.Holder{}
	for i := range ledger.MaxEntries - 1 {
		running[fmt.Sprintf("%032x", i)] = ledger.Holder{Pod: fmt.Sprintf("uid-live-%d", i)}
	}
	if _, err := f.p.ledger.Seed(running); err != nil || f.p.ledger.Len() != ledger.MaxEntries {
		t.Fatalf("seed live pods: %v, len %d", err, f.p.ledger.Len())
	}
	before := counter(t, f.p.Metrics().Refusals.WithLabelValues(verify.ReasonReplayed))
	late := pod("late", nil)
	err = create(late, ctr("late", seal(t, f.key, "lpu2")))
	if err == nil || !strings.Contains(err.Error(), "ledger full") {
		t.Fatalf("new ID at a ledger full of running pods: err=%v, want a refusal", err)
	}
	if got := counter(t, f.p.Metrics().LedgerFull); got != 1 {
		t.Errorf("lpu_nri_ledger_full_total = %v, want 1", got)
	}
	if got := counter(t, f.p.Metrics().Refusals.WithLabelValues(verify.ReasonReplayed)); got != before+1 {
		t.Errorf("refusals{reason=replayed} = %v, want %v", got, before+1)
	}
	if err := create(victim, ctr("victim", ann)); err != nil {
		t.Errorf("the victim's restart at a full ledger: %v", err)
	}
}

// TestStartAfterClaim: over the real NRI runtime side, a container whose
// CreateContainer recorded a new allocation ID starts (StartContainer
// waits for the record's fdatasync, then lets it through), and the record
// holds against another pod after lpu-nri's ledger is reopened.
func TestStartAfterClaim(t *testing.T) {
	state := t.TempDir()
	f, rt := ledgerFixture(t, state)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	owner := pod("owner", nil)
	id := inject.NewAllocationID()
	ann, err := f.key.AnnotationsWithID([]string{"lpu1"}, id)
	if err != nil {
		t.Fatal(err)
	}
	c := ctr("owner", ann)
	if _, err := rt.CreateContainer(ctx, owner, c); err != nil {
		t.Fatal(err)
	}
	if err := rt.StartContainer(ctx, owner, c); err != nil {
		t.Fatalf("StartContainer after a new claim: %v", err)
	}
	re, err := ledger.Open(state)
	if err != nil {
		t.Fatal(err)
	}
	defer re.Close()
	if err := re.Claim(id, ledger.Holder{Pod: "another-pod"}); !errors.Is(err, ledger.ErrOtherPod) {
		t.Errorf("the started container's ID after a reopen: %v, want ErrOtherPod", err)
	}
}

// ledgerFixture is an 8-LPU plugin with its ledger in state, connected to
// a real NRI runtime side.
func ledgerFixture(t *testing.T, state string) (*fixture, *nritest.Runtime) {
	t.Helper()
	f := newFixture(t, 8, false, func(c *Config) {
		l, err := ledger.Open(state)
		if err != nil {
			t.Fatal(err)
		}
		c.Ledger = l
	})
	rt := nritest.New(t)
	rt.Start(t)
	f.connect(t, rt)
	rt.WaitPlugins(t, 1)
	return f, rt
}

// TestLedgerShares is F1 of the fourth round over the real NRI runtime
// side: one pod whose init containers each bring a fresh allocation ID is
// refused past ledger.MaxPerPod (counted, logged), another tenant's pod is
// served; and pods that finished but are never deleted (StopPodSandbox)
// leave the ledger to everyone else.
func TestLedgerShares(t *testing.T) {
	f, rt := ledgerFixture(t, t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	hog := &api.PodSandbox{Id: "pod-hog", Name: "hog", Uid: "uid-hog", Namespace: "evil"}
	for i := range ledger.MaxPerPod + 3 {
		c := &api.Container{Id: fmt.Sprintf("init-%d", i), PodSandboxId: hog.Id, Name: fmt.Sprintf("init-%d", i), Annotations: seal(t, f.key, "lpu0")}
		_, err := rt.CreateContainer(ctx, hog, c)
		switch {
		case i < ledger.MaxPerPod && err != nil:
			t.Fatalf("init container %d within the share: %v", i, err)
		case i >= ledger.MaxPerPod && (err == nil || !strings.Contains(err.Error(), "its share")):
			t.Fatalf("init container %d past the share: %v, want a refusal", i, err)
		}
		if err == nil {
			if err := rt.StopContainer(ctx, hog, c); err != nil { // completed
				t.Fatal(err)
			}
		}
	}
	if got := counter(t, f.p.Metrics().LedgerShare); got != 3 {
		t.Errorf("lpu_nri_ledger_share_refused_total = %v, want 3", got)
	}
	other := &api.PodSandbox{Id: "pod-other", Name: "other", Uid: "uid-other", Namespace: "good"}
	if _, err := rt.CreateContainer(ctx, other, &api.Container{Id: "c-other", PodSandboxId: other.Id, Name: "main", Annotations: seal(t, f.key, "lpu1")}); err != nil {
		t.Fatalf("another tenant's pod: %v", err)
	}

	// Finished Jobs kept forever: their sandboxes stopped, never removed.
	// Their IDs go before any running pod's.
	for i := range ledger.MaxEntries + 10 {
		job := &api.PodSandbox{Id: fmt.Sprintf("pod-job-%d", i), Name: fmt.Sprintf("job-%d", i), Uid: fmt.Sprintf("uid-job-%d", i), Namespace: fmt.Sprintf("ci-%d", i%8)}
		if _, _, err := f.p.CreateContainer(ctx, job, &api.Container{Id: "c-" + job.Id, PodSandboxId: job.Id, Name: "main", Annotations: seal(t, f.key, "lpu2")}); err != nil {
			t.Fatalf("job %d: %v", i, err)
		}
		if i%512 == 0 { // some over the real runtime side, the rest direct
			if err := rt.StopPodSandbox(ctx, job); err != nil {
				t.Fatal(err)
			}
		} else if err := f.p.StopPodSandbox(ctx, job); err != nil {
			t.Fatal(err)
		}
	}
	if got := counter(t, f.p.Metrics().LedgerFull); got != 0 {
		t.Errorf("lpu_nri_ledger_full_total = %v after stopped pods, want 0", got)
	}
	if got := f.p.ledger.Namespaces(); got["good"] != 1 || got["evil"] != ledger.MaxPerPod {
		t.Errorf("running pods' IDs evicted by stopped ones: %v", got)
	}
}

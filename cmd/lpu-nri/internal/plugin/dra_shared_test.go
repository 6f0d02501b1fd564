package plugin

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"

	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/verify"
	"github.com/hyperaccel/lpu-node/internal/dracheckpoint"
	"github.com/hyperaccel/lpu-node/pkg/inject"
)

// sharedState writes a checkpoint: tenant claim c1 on lpu4-7 reserved for
// pods, and admin claim adm on the same LPUs reserved for uid-m.
func sharedState(t *testing.T, dir string, pods ...string) {
	t.Helper()
	claim := func(uid string, admin bool, pods ...string) dracheckpoint.Claim {
		return dracheckpoint.Claim{UID: uid, Namespace: "team", Name: "lpus-" + uid, LPUs: []string{"lpu4", "lpu5", "lpu6", "lpu7"},
			Devices:   []dracheckpoint.Device{{Request: "lpus", Pool: "node-a", Device: "ring0-start4-size4"}},
			CDIDevice: inject.ClaimDeviceID(uid), SpecName: "lpu.hyperaccel.ai-claim_" + uid + ".json", Pods: pods, AdminAccess: admin}
	}
	if err := dracheckpoint.Save(dir, &dracheckpoint.State{Claims: map[string]dracheckpoint.Claim{
		"c1": claim("c1", false, pods...), "adm": claim("adm", true, "uid-m"),
	}}); err != nil {
		t.Fatal(err)
	}
}

func sharedFixture(t *testing.T, wait time.Duration, pods ...string) (*fixture, string) {
	dir := t.TempDir()
	sharedState(t, dir, pods...)
	return newFixture(t, 8, false, func(c *Config) {
		c.ClaimWait = wait
		c.Claims = func(pod string, claims []string) ([]string, error) { return dracheckpoint.PodLPUs(dir, pod, claims) }
	}), dir
}

func decideClaim(f *fixture, podName, claim string) (time.Duration, error) {
	start := time.Now()
	_, _, err := f.p.verifier.Decide(context.Background(), pod(podName, nil), claimCtr(podName, []string{claim}, 4, 5, 6, 7))
	return time.Since(start), err
}

// A pod that joins a prepared claim while CreateContainer runs is admitted
// once lpu-dra records it, within ClaimWait; one never recorded is refused
// after ClaimWait; a claim that is not prepared at all is refused at once.
func TestClaimWaitForLateReservation(t *testing.T) {
	f, dir := sharedFixture(t, 3*time.Second, "uid-x")
	const late = 300 * time.Millisecond
	go func() { time.Sleep(late); sharedState(t, dir, "uid-x", "uid-y") }()
	took, err := decideClaim(f, "y", "c1")
	if err != nil || took < late {
		t.Fatalf("late-recorded pod: %v after %v, want admitted after ≥ %v", err, took, late)
	}

	f, _ = sharedFixture(t, 400*time.Millisecond, "uid-x")
	took, err = decideClaim(f, "y", "c1")
	var r *verify.Refusal
	if !errors.As(err, &r) || r.Reason != verify.ReasonBadValue || !errors.Is(err, dracheckpoint.ErrNotReserved) || took < 350*time.Millisecond {
		t.Fatalf("never-recorded pod: %v after %v, want a refusal after ClaimWait", err, took)
	}

	f, _ = sharedFixture(t, 3*time.Second, "uid-x")
	if took, err = decideClaim(f, "x", "forged"); err == nil || took > time.Second {
		t.Fatalf("unprepared claim: %v after %v, want a refusal without waiting", err, took)
	}
	f, _ = sharedFixture(t, -1, "uid-x")
	if took, err = decideClaim(f, "y", "c1"); err == nil || took > time.Second {
		t.Fatalf("ClaimWait < 0: %v after %v, want a refusal without waiting", err, took)
	}
}

// An admin claim on a tenant's LPUs is accepted for its own pod only, and
// the audit reports neither the admin container nor the tenant's.
func TestAdminClaimAcceptedAndNotAudited(t *testing.T) {
	f, _ := sharedFixture(t, -1, "uid-x")
	if _, err := decideClaim(f, "m", "adm"); err != nil {
		t.Fatalf("admin pod with its admin claim: %v", err)
	}
	if _, err := decideClaim(f, "x", "adm"); !errors.Is(err, dracheckpoint.ErrNotReserved) {
		t.Fatalf("tenant pod with the admin claim: %v, want refused", err)
	}
	var pods []*api.PodSandbox
	var ctrs []*api.Container
	add := func(podName string, claims ...string) {
		p := pod(podName, nil)
		c := claimCtr(podName, claims, 4, 5, 6, 7)
		c.State = api.ContainerState_CONTAINER_RUNNING
		pods, ctrs = append(pods, p), append(ctrs, c)
	}
	add("x", "c1")
	add("m", "adm")
	if holders, uninjected := f.p.AuditCounts(pods, ctrs); holders != 0 || uninjected != 0 {
		t.Fatalf("AuditCounts = %d holders, %d uninjected; want 0, 0", holders, uninjected)
	}
	add("y", "adm") // not the admin claim's pod
	if holders, _ := f.p.AuditCounts(pods, ctrs); holders != 1 {
		t.Fatalf("AuditCounts = %d holders with a foreign pod on the admin claim, want 1", holders)
	}
}

package verify_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"

	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/verify"
	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/verify/verifytest"
	"github.com/hyperaccel/lpu-node/internal/dracheckpoint"
)

// TestPreparedClaims: a container whose LPUs came from a claim lpu-dra
// prepared for its pod gets nothing added (the runtime applied the claim's
// CDI spec); a claim device in another pod's container, a forged claim,
// or a lpu-nri that cannot read claims refuses it.
func TestPreparedClaims(t *testing.T) {
	_, v := newVerifier(t, 8, false, withClaims(t))
	checkRule(t, v, verify.ErrPreparedClaims, map[string]ruleCase{
		"claim prepared for the pod": {pod: pod("x", nil), ctr: claimCtr("x", []string{"c1"}, 4, 5, 6, 7)},
		"two claims":                 {pod: pod("x", nil), ctr: claimCtr("x", []string{"c1", "c2"}, 1, 4, 5, 6, 7)},
		"claim of another pod": {pod: pod("y", nil), ctr: claimCtr("y", []string{"c1"}, 4, 5, 6, 7),
			reason: verify.ReasonBadValue, has: "lpu-dra claim device: claim team/lpus-c1 (c1) was not prepared for pod uid-y"},
		"forged claim CDI name": {pod: pod("x", nil), ctr: claimCtr("x", []string{"c1", "forged"}, 4, 5, 6, 7),
			reason: verify.ReasonBadValue, has: "claim forged is not prepared by lpu-dra on this node"},
	})
	_, blind := newVerifier(t, 8, false)
	checkRule(t, blind, verify.ErrPreparedClaims, map[string]ruleCase{
		"no claims reader": {pod: pod("x", nil), ctr: claimCtr("x", []string{"c1"}, 4, 5, 6, 7),
			reason: verify.ReasonBadValue, has: "this lpu-nri cannot verify claims"},
	})
}

// shared writes the checkpoint of tenant claim c1 on lpu4..7, reserved for
// pods, and admin claim adm on the same LPUs, reserved for uid-m.
func shared(t *testing.T, dir string, pods ...string) func(string, []string) ([]string, error) {
	adm := verifytest.Claim("adm", []string{"lpu4", "lpu5", "lpu6", "lpu7"}, "uid-m")
	adm.AdminAccess = true
	return verifytest.WriteClaims(t, dir, verifytest.Claim("c1", []string{"lpu4", "lpu5", "lpu6", "lpu7"}, pods...), adm)
}

// sharedVerifier is a verifier over shared(dir, pods) waiting up to wait.
func sharedVerifier(t *testing.T, wait time.Duration, pods ...string) (*verifytest.Node, *verify.Verifier, string) {
	dir := t.TempDir()
	claims := shared(t, dir, pods...)
	nd, v := newVerifier(t, 8, false, func(c *verify.Config) { c.ClaimWait, c.Claims = wait, claims })
	return nd, v, dir
}

func decideClaim(v *verify.Verifier, podName, claim string) (time.Duration, error) {
	start := time.Now()
	_, _, err := v.Decide(context.Background(), pod(podName, nil), claimCtr(podName, []string{claim}, 4, 5, 6, 7))
	return time.Since(start), err
}

// A pod that joins a prepared claim while CreateContainer runs is admitted
// once lpu-dra records it, within ClaimWait; one never recorded is refused
// after ClaimWait; a claim that is not prepared at all is refused at once.
func TestClaimWaitForLateReservation(t *testing.T) {
	_, v, dir := sharedVerifier(t, 3*time.Second, "uid-x")
	const late = 300 * time.Millisecond
	go func() { time.Sleep(late); shared(t, dir, "uid-x", "uid-y") }()
	took, err := decideClaim(v, "y", "c1")
	if err != nil || took < late {
		t.Fatalf("late-recorded pod: %v after %v, want admitted after ≥ %v", err, took, late)
	}

	_, v, _ = sharedVerifier(t, 400*time.Millisecond, "uid-x")
	took, err = decideClaim(v, "y", "c1")
	wantRefusal(t, err, verify.ErrPreparedClaims, verify.ReasonBadValue, "not prepared for pod uid-y")
	if !errors.Is(err, dracheckpoint.ErrNotReserved) || took < 350*time.Millisecond {
		t.Fatalf("never-recorded pod: %v after %v, want a refusal after ClaimWait", err, took)
	}

	_, v, _ = sharedVerifier(t, 3*time.Second, "uid-x")
	if took, err = decideClaim(v, "x", "forged"); !errors.Is(err, verify.ErrPreparedClaims) || took > time.Second {
		t.Fatalf("unprepared claim: %v after %v, want a refusal without waiting", err, took)
	}
	_, v, _ = sharedVerifier(t, -1, "uid-x")
	if took, err = decideClaim(v, "y", "c1"); !errors.Is(err, verify.ErrPreparedClaims) || took > time.Second {
		t.Fatalf("ClaimWait < 0: %v after %v, want a refusal without waiting", err, took)
	}
}

// An admin claim on a tenant's LPUs is accepted for its own pod only, and
// the audit reports neither the admin container nor the tenant's.
func TestAdminClaimAcceptedAndNotAudited(t *testing.T) {
	nd, v, _ := sharedVerifier(t, -1, "uid-x")
	if _, err := decideClaim(v, "m", "adm"); err != nil {
		t.Fatalf("admin pod with its admin claim: %v", err)
	}
	if _, err := decideClaim(v, "x", "adm"); !errors.Is(err, dracheckpoint.ErrNotReserved) {
		t.Fatalf("tenant pod with the admin claim: %v, want refused", err)
	}
	for _, tc := range []struct {
		pod, claim string
		holder     bool
	}{{"x", "c1", false}, {"m", "adm", false}, {"y", "adm", true}} {
		f := audit(nd, v, pod(tc.pod, nil), claimCtr(tc.pod, []string{tc.claim}, 4, 5, 6, 7))
		if (f.Unallocated != "") != tc.holder || f.Uninjected != "" {
			t.Errorf("pod %s on claim %s: %+v, want holder %v", tc.pod, tc.claim, f, tc.holder)
		}
	}
}

// audit is the periodic audit's finding for a running container.
func audit(nd *verifytest.Node, v *verify.Verifier, p *api.PodSandbox, c *api.Container) verify.Finding {
	c.State = api.ContainerState_CONTAINER_RUNNING
	return v.Audit(nd.Store.Load(), p, c)
}

// The validator on its own (a CreateContainer of lpu-nri the runtime lost)
// treats verified claims as the allocation and refuses unverified ones.
func TestValidateDRAClaims(t *testing.T) {
	_, v := newVerifier(t, 8, false, withClaims(t))
	tests := map[string]struct {
		pod    string
		claims []string
		minors []int64
		errHas string
	}{
		"prepared for the pod":      {pod: "x", claims: []string{"c1"}, minors: []int64{4, 5, 6, 7}},
		"forged claim":              {pod: "x", claims: []string{"nope"}, minors: []int64{4, 5, 6, 7}, errHas: "(none): not allocated /dev/lpu4"},
		"pod not in the checkpoint": {pod: "y", claims: []string{"c1"}, minors: []int64{4, 5, 6, 7}, errHas: "(none): not allocated /dev/lpu4"},
		"final set short of claims": {pod: "x", claims: []string{"c1", "c2"}, minors: []int64{4, 5, 6, 7}, errHas: "missing lpu1 (509:1)"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := v.Validate(pod(tc.pod, nil), claimCtr(tc.pod, tc.claims, tc.minors...), &api.ContainerAdjustment{})
			if tc.errHas == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			wantRefusal(t, err, verify.ErrFinalDevices, verify.ReasonMismatch, tc.errHas)
		})
	}
}

// The audit counts the LPUs of verified claims as the container's
// allocation: a container holding them is neither an unallocated holder
// nor uninjected, one holding fewer is uninjected, and one whose claim is
// forged or another pod's, or that holds an LPU no claim of its names, is
// an unallocated holder.
func TestAuditDRAClaims(t *testing.T) {
	nd, v := newVerifier(t, 8, false, withClaims(t))
	tests := map[string]struct {
		pod                string
		claims             []string
		minors             []int64
		holder, uninjected bool
	}{
		"ok":     {pod: "x", claims: []string{"c1"}, minors: []int64{4, 5, 6, 7}},
		"two":    {pod: "x", claims: []string{"c1", "c2"}, minors: []int64{1, 4, 5, 6, 7}},
		"short":  {pod: "x", claims: []string{"c1"}, minors: []int64{4, 5}, uninjected: true},
		"forged": {pod: "x", claims: []string{"forged"}, minors: []int64{4}, holder: true},
		"theirs": {pod: "y", claims: []string{"c1"}, minors: []int64{4, 5, 6, 7}, holder: true},
		"beyond": {pod: "x", claims: []string{"c2"}, minors: []int64{1, 0}, holder: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f := audit(nd, v, pod(tc.pod, nil), claimCtr(tc.pod, tc.claims, tc.minors...))
			if (f.Unallocated != "") != tc.holder || (f.Uninjected != "") != tc.uninjected {
				t.Fatalf("Audit = %+v, want holder %v, uninjected %v", f, tc.holder, tc.uninjected)
			}
		})
	}
}

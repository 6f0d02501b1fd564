package plugin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"

	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/verify"
	"github.com/hyperaccel/lpu-node/internal/dracheckpoint"
	"github.com/hyperaccel/lpu-node/internal/nritest"
	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/inject"
)

// A container whose LPUs came from a claim lpu-dra prepared for its pod
// gets nothing added (the runtime applied the claim's CDI spec); a claim
// device in another pod's container, or any pod annotation claiming LPUs,
// is refused; a container without LPUs still gets LPU_VISIBLE_DEVICES=none.
func TestDRAClaimContainers(t *testing.T) {
	stateDir := t.TempDir()
	state := &dracheckpoint.State{Claims: map[string]dracheckpoint.Claim{"c1": {
		UID: "c1", Namespace: "team", Name: "lpus", LPUs: []string{"lpu4", "lpu5", "lpu6", "lpu7"},
		Devices:   []dracheckpoint.Device{{Request: "lpus", Pool: "node-a", Device: "ring0-start4-size4"}},
		CDIDevice: inject.ClaimDeviceID("c1"), SpecName: "lpu.hyperaccel.ai-claim_c1.json", Pods: []string{"uid-x"},
	}}}
	if err := dracheckpoint.Save(stateDir, state); err != nil {
		t.Fatal(err)
	}
	withClaims := func(c *Config) {
		c.Claims = func(pod string, claims []string) ([]string, error) {
			return dracheckpoint.PodLPUs(stateDir, pod, claims)
		}
	}
	withClaim := func(name string, ann map[string]string) *api.Container {
		c := ctr(name, ann)
		c.CDIDevices = []*api.CDIDevice{{Name: "vendor.example/gpu=0"}, {Name: inject.ClaimDeviceID("c1")}}
		return c
	}
	tests := map[string]struct {
		opts   []func(*Config)
		pod    *api.PodSandbox
		ctr    *api.Container
		reason string // "" means admitted
		none   bool   // admitted with LPU_VISIBLE_DEVICES=none
	}{
		"claim prepared for the pod": {opts: []func(*Config){withClaims}, pod: pod("x", nil), ctr: withClaim("x", nil)},
		"claim of another pod":       {opts: []func(*Config){withClaims}, pod: pod("y", nil), ctr: withClaim("y", nil), reason: verify.ReasonBadValue},
		"no verifier":                {pod: pod("x", nil), ctr: withClaim("x", nil), reason: verify.ReasonBadValue},
		"forged pod annotation": {opts: []func(*Config){withClaims}, pod: pod("x", map[string]string{"lpu.hyperaccel.ai/devices": "lpu0"}),
			ctr: withClaim("x", nil), reason: verify.ReasonPodAnnotation},
		"no LPUs at all": {opts: []func(*Config){withClaims}, pod: pod("z", nil), ctr: ctr("z", nil), none: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, 8, false, tc.opts...)
			adj, _, err := f.p.verifier.Decide(context.Background(), tc.pod, tc.ctr)
			var r *verify.Refusal
			switch {
			case tc.reason != "":
				if !errors.As(err, &r) || r.Reason != tc.reason {
					t.Fatalf("Decide error = %v, want refusal %q", err, tc.reason)
				}
			case err != nil:
				t.Fatalf("Decide: %v", err)
			case tc.none:
				if v := viewOf(adj); !slices.Contains(v.Env, "LPU_VISIBLE_DEVICES=none") || len(v.Devices) != 0 {
					t.Fatalf("adjustment %+v, want only LPU_VISIBLE_DEVICES=none", v)
				}
			case adj != nil:
				t.Fatalf("adjustment %+v for a claim container, want none", viewOf(adj))
			}
		})
	}
}

// The Synchronize audit does not count a container holding LPUs from a
// claim lpu-dra prepared for its pod, and does count one whose claim
// belongs to another pod.
func TestAuditDRAClaims(t *testing.T) {
	stateDir := t.TempDir()
	if err := dracheckpoint.Save(stateDir, &dracheckpoint.State{Claims: map[string]dracheckpoint.Claim{"c1": {
		UID: "c1", Namespace: "team", Name: "lpus", LPUs: []string{"lpu4"},
		Devices:   []dracheckpoint.Device{{Request: "lpus", Pool: "node-a", Device: "ring0-start4-size1"}},
		CDIDevice: inject.ClaimDeviceID("c1"), SpecName: "lpu.hyperaccel.ai-claim_c1.json", Pods: []string{"uid-mine"},
	}}}); err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, 8, false, func(c *Config) {
		c.Claims = func(pod string, claims []string) ([]string, error) {
			return dracheckpoint.PodLPUs(stateDir, pod, claims)
		}
	})
	var pods []*api.PodSandbox
	var ctrs []*api.Container
	for _, name := range []string{"mine", "theirs"} {
		pods = append(pods, pod(name, nil))
		c := ctr(name, nil)
		c.State = api.ContainerState_CONTAINER_RUNNING
		c.CDIDevices = []*api.CDIDevice{{Name: inject.ClaimDeviceID("c1")}}
		c.Linux = &api.LinuxContainer{Devices: []*api.LinuxDevice{{Path: "/dev/lpu4", Type: "c", Major: device.DefaultMajor, Minor: 4}}}
		ctrs = append(ctrs, c)
	}
	if got := f.p.Audit(pods, ctrs); got != 1 {
		t.Fatalf("Audit = %d unallocated holders, want 1 (the other pod's)", got)
	}
}

// draFixture is a plugin whose Claims reads a checkpoint where lpu-dra
// prepared claim c1 (lpu4..lpu7) and c2 (lpu1) for pod uid-x.
func draFixture(t *testing.T) *fixture {
	t.Helper()
	stateDir := t.TempDir()
	claim := func(uid string, lpus ...string) dracheckpoint.Claim {
		return dracheckpoint.Claim{UID: uid, Namespace: "team", Name: "lpus-" + uid, LPUs: lpus,
			Devices:   []dracheckpoint.Device{{Request: "lpus", Pool: "node-a", Device: "ring0-" + uid}},
			CDIDevice: inject.ClaimDeviceID(uid), SpecName: "lpu.hyperaccel.ai-claim_" + uid + ".json", Pods: []string{"uid-x"}}
	}
	if err := dracheckpoint.Save(stateDir, &dracheckpoint.State{Claims: map[string]dracheckpoint.Claim{
		"c1": claim("c1", "lpu4", "lpu5", "lpu6", "lpu7"), "c2": claim("c2", "lpu1"),
	}}); err != nil {
		t.Fatal(err)
	}
	return newFixture(t, 8, false, func(c *Config) {
		c.Claims = func(pod string, claims []string) ([]string, error) {
			return dracheckpoint.PodLPUs(stateDir, pod, claims)
		}
	})
}

// claimCtr is a container of pod name whose CDI devices name the claims
// and whose pristine devices (the claims' CDI specs, applied by the
// runtime) are the LPU nodes of minors.
func claimCtr(name string, claims []string, minors ...int64) *api.Container {
	c := ctr(name, nil)
	for _, uid := range claims {
		c.CDIDevices = append(c.CDIDevices, &api.CDIDevice{Name: inject.ClaimDeviceID(uid)})
	}
	c.Linux = &api.LinuxContainer{}
	for _, m := range minors {
		c.Linux.Devices = append(c.Linux.Devices, lpuDev(fmt.Sprintf("/dev/lpu%d", m), m))
	}
	return c
}

// TestDRAValidator: through the NRI adaptation with lpu-nri as validator
// and another plugin, a container whose LPUs come from claims lpu-dra
// prepared for its pod is admitted with nothing added, and the claims'
// LPUs are its verified allocation: a final device set that differs from
// them, a forged claim, a claim of another pod or a claim CDI device
// injected by a plugin refuses it.
func TestDRAValidator(t *testing.T) {
	f := draFixture(t)
	rt := nritest.New(t)
	rt.Start(t)
	f.connect(t, rt)
	var adj func() *api.ContainerAdjustment
	runOther(t, rt, &other{adj: func() *api.ContainerAdjustment { return adj() }})
	rt.WaitPlugins(t, 2)

	none := func() *api.ContainerAdjustment { return &api.ContainerAdjustment{} }
	tests := map[string]struct {
		other  func() *api.ContainerAdjustment
		pod    string
		claims []string
		minors []int64
		errHas string // "" admitted
	}{
		"claim's LPUs, nothing else": {other: none, pod: "x", claims: []string{"c1"}, minors: []int64{4, 5, 6, 7}},
		"two claims":                 {other: none, pod: "x", claims: []string{"c1", "c2"}, minors: []int64{1, 4, 5, 6, 7}},
		"one of the claim's LPUs missing": {other: none, pod: "x", claims: []string{"c1"}, minors: []int64{4, 5, 6},
			errHas: "differ from its allocation (lpu4,lpu5,lpu6,lpu7): missing lpu7 (509:7)"},
		"another claim's LPU carried": {other: none, pod: "x", claims: []string{"c2"}, minors: []int64{1, 4},
			errHas: "container carries LPU device nodes it was not allocated (/dev/lpu4 (509:4, lpu4))"},
		"another plugin adds an LPU": {
			other: func() *api.ContainerAdjustment {
				a := &api.ContainerAdjustment{}
				a.AddDevice(lpuDev("/dev/accel0", 0))
				return a
			},
			pod: "x", claims: []string{"c2"}, minors: []int64{1},
			errHas: "differ from its allocation (lpu1): not allocated /dev/accel0 (509:0, lpu0)",
		},
		"another plugin injects a claim CDI device": {
			other: func() *api.ContainerAdjustment {
				return &api.ContainerAdjustment{CDIDevices: []*api.CDIDevice{{Name: inject.ClaimDeviceID("c2")}}}
			},
			pod: "x", claims: []string{"c1"}, minors: []int64{4, 5, 6, 7},
			errHas: `CDI device "lpu.hyperaccel.ai/claim=c2" injected by a plugin`,
		},
		"forged claim CDI name": {other: none, pod: "x", claims: []string{"forged"}, minors: []int64{4, 5, 6, 7},
			errHas: "claim forged is not prepared by lpu-dra on this node"},
		"forged claim next to a real one": {other: none, pod: "x", claims: []string{"c1", "forged"}, minors: []int64{4, 5, 6, 7},
			errHas: "claim forged is not prepared by lpu-dra on this node"},
		"pod not in the checkpoint": {other: none, pod: "y", claims: []string{"c1"}, minors: []int64{4, 5, 6, 7},
			errHas: "claim team/lpus-c1 (c1) was not prepared for pod uid-y"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			adj = tc.other
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			rsp, err := rt.CreateContainer(ctx, pod(tc.pod, nil), claimCtr(tc.pod, tc.claims, tc.minors...))
			if tc.errHas == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if v := viewOf(rsp.GetAdjust()); len(v.Devices) != 0 || len(v.Env) != 0 || len(v.Mounts) != 0 {
					t.Fatalf("adjustment %+v for a claim container, want nothing added", v)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.errHas) {
				t.Fatalf("CreateContainer = %v, %v; want error containing %q", viewOf(rsp.GetAdjust()), err, tc.errHas)
			}
		})
	}
}

// The validator on its own (a CreateContainer of lpu-nri the runtime lost)
// treats verified claims as the allocation and refuses unverified ones.
func TestValidateDRAClaims(t *testing.T) {
	f := draFixture(t)
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
			err := f.p.verifier.Validate(pod(tc.pod, nil), claimCtr(tc.pod, tc.claims, tc.minors...), &api.ContainerAdjustment{})
			if tc.errHas == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			var r *verify.Refusal
			if !errors.As(err, &r) || r.Reason != verify.ReasonMismatch || !strings.Contains(err.Error(), tc.errHas) {
				t.Fatalf("Validate = %v, want a mismatch refusal containing %q", err, tc.errHas)
			}
		})
	}
}

// The audit counts the LPUs of verified claims as the container's
// allocation: a container holding them is neither an unallocated holder
// nor uninjected, one holding fewer is uninjected, and one whose claim is
// forged or another pod's is an unallocated holder.
func TestAuditCountsDRAClaims(t *testing.T) {
	f := draFixture(t)
	var pods []*api.PodSandbox
	var ctrs []*api.Container
	add := func(podName, id string, claims []string, minors ...int64) {
		p := pod(podName, nil)
		p.Id = "pod-" + id
		c := claimCtr(podName, claims, minors...)
		c.Id, c.PodSandboxId, c.State = "ctr-"+id, p.Id, api.ContainerState_CONTAINER_RUNNING
		pods, ctrs = append(pods, p), append(ctrs, c)
	}
	add("x", "ok", []string{"c1"}, 4, 5, 6, 7)
	add("x", "two", []string{"c1", "c2"}, 1, 4, 5, 6, 7)
	add("x", "short", []string{"c1"}, 4, 5)        // uninjected: lpu6, lpu7 missing
	add("x", "forged", []string{"forged"}, 4)      // holder
	add("y", "theirs", []string{"c1"}, 4, 5, 6, 7) // holder
	add("x", "beyond", []string{"c2"}, 1, 0)       // holder: lpu0 is no claim's
	holders, uninjected := f.p.AuditCounts(pods, ctrs)
	if holders != 3 || uninjected != 1 {
		t.Fatalf("AuditCounts = %d holders, %d uninjected; want 3, 1", holders, uninjected)
	}
}

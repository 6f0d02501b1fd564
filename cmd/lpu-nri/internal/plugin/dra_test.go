package plugin

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/containerd/nri/pkg/api"

	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/metrics"
	"github.com/hyperaccel/lpu-node/internal/dracheckpoint"
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
	verify := func(c *Config) {
		c.Claims = func(pod string, claims []string) error { return dracheckpoint.Verify(stateDir, pod, claims) }
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
		"claim prepared for the pod": {opts: []func(*Config){verify}, pod: pod("x", nil), ctr: withClaim("x", nil)},
		"claim of another pod":       {opts: []func(*Config){verify}, pod: pod("y", nil), ctr: withClaim("y", nil), reason: metrics.ReasonBadValue},
		"no verifier":                {pod: pod("x", nil), ctr: withClaim("x", nil), reason: metrics.ReasonBadValue},
		"forged pod annotation": {opts: []func(*Config){verify}, pod: pod("x", map[string]string{"lpu.hyperaccel.ai/devices": "lpu0"}),
			ctr: withClaim("x", nil), reason: metrics.ReasonPodAnnotation},
		"no LPUs at all": {opts: []func(*Config){verify}, pod: pod("z", nil), ctr: ctr("z", nil), none: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, 8, false, tc.opts...)
			adj, _, err := f.p.Decide(context.Background(), tc.pod, tc.ctr)
			var r *Refusal
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
		c.Claims = func(pod string, claims []string) error { return dracheckpoint.Verify(stateDir, pod, claims) }
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

package plugin

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"

	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/verify/verifytest"
	"github.com/hyperaccel/lpu-node/internal/nritest"
	"github.com/hyperaccel/lpu-node/pkg/inject"
)

// draFixture is a plugin whose Claims reads a checkpoint where lpu-dra
// prepared claim c1 (lpu4..lpu7) and c2 (lpu1) for pod uid-x.
func draFixture(t *testing.T) *fixture {
	t.Helper()
	claims := verifytest.WriteClaims(t, t.TempDir(),
		verifytest.Claim("c1", []string{"lpu4", "lpu5", "lpu6", "lpu7"}, "uid-x"), verifytest.Claim("c2", []string{"lpu1"}, "uid-x"))
	return newFixture(t, 8, false, func(c *Config) { c.Claims = claims })
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

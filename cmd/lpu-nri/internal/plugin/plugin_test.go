package plugin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/verify"
	"github.com/hyperaccel/lpu-node/internal/nritest"
	"github.com/hyperaccel/lpu-node/pkg/inject"
	"github.com/hyperaccel/lpu-node/pkg/ready"
)

// TestCreateContainerThroughRuntime: over the real NRI adaptation, a
// verified allocation comes back as the adjustment (nodes in ring order,
// env, driver mount) and is counted, an unallocated container gets
// LPU_VISIBLE_DEVICES=none, and each refusal fails the creation with the
// verifier's message and counts its reason. The rules themselves are
// verify's tests.
func TestCreateContainerThroughRuntime(t *testing.T) {
	f := newFixture(t, 8, true)
	tests := map[string]struct {
		podAnn, ctrAnn map[string]string
		env            []string
		want           view
		reason         string // refusal reason; "" means accepted
		errHas         string
	}{
		"valid allocation in ring order": {
			ctrAnn: seal(t, f.key, "lpu7", "lpu0", "lpu1"), // wraps around the ring
			want: view{
				Devices: []string{dev(7), dev(0), dev(1)},
				Env:     []string{"LPU_VISIBLE_DEVICES=7,0,1", "NUM_LPU_DEVICES=3", driverEnv},
				Mounts:  []string{libMount},
			},
		},
		"no allocation but LPU_VISIBLE_DEVICES in image env": {
			env:  []string{"LPU_VISIBLE_DEVICES=0,1", "HOME=/root"},
			want: view{Env: []string{"LPU_VISIBLE_DEVICES=none"}},
		},
		"forged annotation without seal": {
			ctrAnn: map[string]string{inject.AnnotationDevices: "lpu0,lpu1"},
			reason: verify.ReasonBadSeal, errHas: "seal missing",
		},
		"key in pod annotations only": {
			podAnn: map[string]string{inject.AnnotationDevices: "lpu0"},
			reason: verify.ReasonPodAnnotation, errHas: "a pod cannot claim LPUs",
		},
		"unhealthy device": {
			ctrAnn: seal(t, f.key, "lpu4", "lpu5"),
			reason: verify.ReasonUnhealthyDevice, errHas: `lpu5 is unhealthy: status "ECC_ERROR"`,
		},
		"LPU_VISIBLE_DEVICES twice in env": {
			env:    []string{"LPU_VISIBLE_DEVICES=0,1", "HOME=/root", "LPU_VISIBLE_DEVICES=2"},
			reason: verify.ReasonBadValue, errHas: "sets LPU_VISIBLE_DEVICES 2 times",
		},
	}

	rt := nritest.New(t)
	rt.Start(t)
	f.connect(t, rt)
	rt.WaitPlugins(t, 1)

	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			m := f.p.Metrics()
			refusedBefore := 0.0
			if tc.reason != "" {
				refusedBefore = counter(t, m.Refusals.WithLabelValues(tc.reason))
			}
			injectedBefore := counter(t, m.Injections)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			rsp, err := rt.CreateContainer(ctx, pod("p", tc.podAnn), ctr("p", tc.ctrAnn, tc.env...))
			if tc.reason != "" {
				if err == nil {
					t.Fatalf("container accepted with %v, want refusal %q", viewOf(rsp.GetAdjust()), tc.reason)
				}
				if !strings.Contains(err.Error(), tc.errHas) || !strings.Contains(err.Error(), "lpu-nri refused the container") {
					t.Fatalf("error %q does not say %q", err, tc.errHas)
				}
				if got := counter(t, m.Refusals.WithLabelValues(tc.reason)); got != refusedBefore+1 {
					t.Fatalf("refusals{reason=%q} = %v, want %v", tc.reason, got, refusedBefore+1)
				}
				return
			}
			if err != nil {
				t.Fatalf("CreateContainer: %v", err)
			}
			got := viewOf(rsp.GetAdjust())
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("adjustment\n got %+v\nwant %+v", got, tc.want)
			}
			wantInj := injectedBefore
			if len(tc.want.Devices) > 0 {
				wantInj++
			}
			if got := counter(t, m.Injections); got != wantInj {
				t.Fatalf("injections = %v, want %v", got, wantInj)
			}
		})
	}
}

func TestRuntimeRestart(t *testing.T) {
	f := newFixture(t, 8, false)
	rt := nritest.New(t)
	rs, err := ready.Listen(ready.Path(rt.Dir))
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	f.p.ready = rs

	// The runtime is not there yet: the plugin keeps retrying, not ready.
	f.connect(t, rt)
	time.Sleep(150 * time.Millisecond)
	if err := ready.Check(context.Background(), ready.Path(rt.Dir)); !errors.Is(err, ready.ErrNotConnected) {
		t.Fatalf("readiness before the runtime exists = %v, want ErrNotConnected", err)
	}

	ann := seal(t, f.key, "lpu2", "lpu3")
	create := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		rsp, err := rt.CreateContainer(ctx, pod("r", nil), ctr("r", ann))
		if err != nil {
			return err
		}
		if got := viewOf(rsp.GetAdjust()).Devices; !slices.Equal(got, []string{dev(2), dev(3)}) {
			return fmt.Errorf("devices %v", got)
		}
		return nil
	}
	for round := range 3 {
		rt.Start(t)
		rt.WaitPlugins(t, 1)
		waitReady(t, rt.Dir, nil)
		if got := counter(t, f.p.Metrics().Connected); got != 1 {
			t.Fatalf("round %d: lpu_nri_connected = %v, want 1", round, got)
		}
		if err := create(); err != nil {
			t.Fatalf("round %d: injection after (re)connect: %v", round, err)
		}
		rt.Stop()
		waitReady(t, rt.Dir, ready.ErrNotConnected)
		if got := counter(t, f.p.Metrics().Connected); got != 0 {
			t.Fatalf("round %d: lpu_nri_connected = %v after runtime stop, want 0", round, got)
		}
	}
	if got := counter(t, f.p.Metrics().Reconnects); got != 3 {
		t.Fatalf("lpu_nri_connections_total = %v, want 3", got)
	}
}

// waitReady polls the readiness socket until Check returns want (nil or an
// error wrapping it).
func waitReady(t *testing.T, stateDir string, want error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := ready.Check(context.Background(), ready.Path(stateDir))
		if (want == nil && err == nil) || (want != nil && errors.Is(err, want)) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("readiness = %v after 10s, want %v", err, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

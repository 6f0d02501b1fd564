package plugin

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/metrics"
	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/inject"
)

// FuzzDecide feeds arbitrary pod and container annotations through the
// trust rules. Invariants: no panic; every error is a Refusal with a known
// reason; a reserved pod key always refuses; devices are granted only for a
// value carrying this key's seal, only inventory devices, with
// LPU_VISIBLE_DEVICES naming exactly them; otherwise the container gets no
// device and LPU_VISIBLE_DEVICES=none. The legacy v1 form is accepted
// here so that a fuzzed value can reach a grant without an allocation ID
// seal; TestLegacySeals covers the switch.
func FuzzDecide(f *testing.F) {
	fx := newFixture(f, 8, true, func(c *Config) { c.AcceptLegacySeals = true })
	seal := fx.legacy.SealV1
	f.Add("app", "x", "lpu0,lpu1", seal("lpu0,lpu1"), true, true)
	f.Add("lpu.hyperaccel.ai/devices", "lpu0", "lpu0", seal("lpu0"), true, true)
	f.Add("app", "x", "lpu0", "", true, false)
	f.Add("app", "x", "", seal(""), false, true)
	f.Add("app", "x", "../lpu0", seal("../lpu0"), true, true)
	f.Add("app", "x", "lpu1,lpu1", seal("lpu1,lpu1"), true, true)
	f.Add("app", "x", "lpu5", seal("lpu5"), true, true)
	f.Add("app", "x", "lpu9", seal("lpu9"), true, true)
	f.Add("LPU.HYPERACCEL.AI/devices", "lpu0", "lpu7,lpu0", seal("lpu7,lpu0"), true, true)
	f.Add("app", "x", "lpu0", "v1:"+strings.Repeat("0", 64), true, true)
	reasons := map[string]bool{}
	for _, r := range metrics.Reasons {
		reasons[r] = true
	}
	f.Fuzz(func(t *testing.T, podKey, podVal, devVal, sealVal string, hasDev, hasSeal bool) {
		ann := map[string]string{}
		if hasDev {
			ann[inject.AnnotationDevices] = devVal
		}
		if hasSeal {
			ann[inject.AnnotationSeal] = sealVal
		}
		adj, alloc, err := fx.p.Decide(context.Background(), pod("f", map[string]string{podKey: podVal}), ctr("f", ann))
		ids := alloc.IDs
		reserved := len(podKey) >= len(inject.AnnotationPrefix) && strings.EqualFold(podKey[:len(inject.AnnotationPrefix)], inject.AnnotationPrefix)
		if err != nil {
			var r *Refusal
			if !errors.As(err, &r) || !reasons[r.Reason] {
				t.Fatalf("error %v is not a Refusal with a known reason", err)
			}
			if reserved && r.Reason != metrics.ReasonPodAnnotation {
				t.Fatalf("reserved pod key %q refused for %q", podKey, r.Reason)
			}
			return
		}
		if reserved {
			t.Fatalf("reserved pod key %q accepted", podKey)
		}
		var vis []string
		for _, e := range adj.GetEnv() {
			if e.GetKey() == inject.EnvVisibleDevices {
				vis = append(vis, e.GetValue())
			}
		}
		if len(vis) != 1 {
			t.Fatalf("LPU_VISIBLE_DEVICES set %d times: %v", len(vis), vis)
		}
		devs := adj.GetLinux().GetDevices()
		if len(ids) == 0 {
			if hasDev || hasSeal {
				t.Fatalf("annotations %v accepted without devices", ann)
			}
			if len(devs) != 0 || vis[0] != inject.VisibleNone || len(adj.GetMounts()) != 0 {
				t.Fatalf("unallocated container got devices %v, env %v, mounts %v", devs, vis, adj.GetMounts())
			}
			return
		}
		if !hasDev || !hasSeal || sealVal != seal(devVal) || devVal != inject.EncodeIDs(ids) {
			t.Fatalf("granted %v for annotations %v not sealed by our key", ids, ann)
		}
		snap := fx.store.Load()
		var idx []string
		for i, id := range ids {
			d, ok := snap.Device(id)
			if !ok || !d.Health.Healthy {
				t.Fatalf("granted %s: unknown or unhealthy", id)
			}
			if devs[i].GetPath() != d.Path || devs[i].GetMajor() != d.Major || devs[i].GetMinor() != d.Minor {
				t.Fatalf("node %v does not match discovery %+v", devs[i], d)
			}
			n, _ := device.ParseID(id)
			idx = append(idx, strconv.Itoa(n))
		}
		if len(devs) != len(ids) || vis[0] != strings.Join(idx, ",") {
			t.Fatalf("devices %v / env %q do not match ids %v", devs, vis[0], ids)
		}
	})
}

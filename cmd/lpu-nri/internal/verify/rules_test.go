package verify_test

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"

	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/inventory"
	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/ledger"
	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/verify"
	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/verify/verifytest"
	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/inject"
)

// The kit's nodes, rules and claim containers under short names.
var (
	lpuDev   = verifytest.LPUDev
	rule     = verifytest.CgroupRule
	ctrRules = verifytest.ContainerdRules
	claimCtr = verifytest.ClaimCtr
)

const lpuMajor = device.DefaultMajor

// ruleCase is one container a rule judges: refused with reason and a
// message holding has, or (reason "") admitted with LPU_VISIBLE_DEVICES
// set to vis ("" for a claim container: nothing is added).
type ruleCase struct {
	pod    *api.PodSandbox // default pod("p", nil)
	ctr    *api.Container
	reason string
	has    string
	vis    string
}

// checkRule runs Decide on each case; a refusal must wrap rule.
func checkRule(t *testing.T, v *verify.Verifier, rule error, cases map[string]ruleCase) {
	t.Helper()
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			adj, _, err := v.Decide(context.Background(), cmp.Or(tc.pod, pod("p", nil)), tc.ctr)
			if tc.reason != "" {
				wantRefusal(t, err, rule, tc.reason, tc.has)
				return
			}
			if err != nil {
				t.Fatalf("Decide: %v", err)
			}
			if got := visible(adj); got != tc.vis {
				t.Fatalf("LPU_VISIBLE_DEVICES = %q, want %q (adjustment %v)", got, tc.vis, adj)
			}
		})
	}
}

// wantRefusal fails t unless err is a Refusal by rule with reason whose
// message holds has.
func wantRefusal(t *testing.T, err, rule error, reason, has string) {
	t.Helper()
	var r *verify.Refusal
	if !errors.Is(err, rule) || !errors.As(err, &r) || r.Reason != reason ||
		!strings.HasPrefix(err.Error(), "lpu-nri refused the container: ") || !strings.Contains(err.Error(), has) {
		t.Fatalf("err = %v, want a refusal by %q (reason %q) saying %q", err, rule, reason, has)
	}
}

// visible is the LPU_VISIBLE_DEVICES value adj sets, "" for none.
func visible(adj *api.ContainerAdjustment) string {
	for _, e := range adj.GetEnv() {
		if e.GetKey() == inject.EnvVisibleDevices {
			return e.GetValue()
		}
	}
	return ""
}

// withClaims has lpu-dra prepare claim c1 (lpu4..lpu7) and c2 (lpu1) for
// pod x (uid-x).
func withClaims(t testing.TB) func(*verify.Config) {
	claims := verifytest.WriteClaims(t, t.TempDir(),
		verifytest.Claim("c1", []string{"lpu4", "lpu5", "lpu6", "lpu7"}, "uid-x"),
		verifytest.Claim("c2", []string{"lpu1"}, "uid-x"))
	return func(c *verify.Config) { c.Claims = claims }
}

func TestPodAnnotations(t *testing.T) {
	nd, v := newVerifier(t, 8, false, withClaims(t))
	valid := seal(t, nd.Key, "lpu0")
	checkRule(t, v, verify.ErrPodAnnotations, map[string]ruleCase{
		"validly sealed value also in pod annotations": {pod: pod("p", valid), ctr: ctr("p", valid),
			reason: verify.ReasonPodAnnotation, has: `pod annotation "lpu.hyperaccel.ai/allocation"`},
		"reserved key in another letter case": {pod: pod("p", map[string]string{"LPU.hyperaccel.ai/devices": "lpu0"}), ctr: ctr("p", valid),
			reason: verify.ReasonPodAnnotation, has: `pod annotation "LPU.hyperaccel.ai/devices"`},
		"key in pod annotations only": {pod: pod("p", map[string]string{inject.AnnotationDevices: "lpu0"}), ctr: ctr("p", nil),
			reason: verify.ReasonPodAnnotation, has: "a pod cannot claim LPUs"},
		"any reserved key": {pod: pod("p", map[string]string{"lpu.hyperaccel.ai/anything": "x"}), ctr: ctr("p", valid),
			reason: verify.ReasonPodAnnotation, has: "lpu.hyperaccel.ai/anything"},
		"claim container": {pod: pod("x", map[string]string{inject.AnnotationDevices: "lpu0"}), ctr: claimCtr("x", []string{"c1"}, 4, 5, 6, 7),
			reason: verify.ReasonPodAnnotation, has: "a pod cannot claim LPUs"},
		"other pod annotations": {pod: pod("p", map[string]string{"app": "x"}), ctr: ctr("p", valid), vis: "0"},
	})
}

// TestOneVisibleDevices: containerd appends image and pod-spec env without
// merging them, and NRI's env adjustment replaces only the first copy: the
// runtime then rewrites it with the last, so the override would be lost.
func TestOneVisibleDevices(t *testing.T) {
	nd, v := newVerifier(t, 8, false, withClaims(t))
	twice := "sets LPU_VISIBLE_DEVICES 2 times"
	checkRule(t, v, verify.ErrOneVisibleDevices, map[string]ruleCase{
		"no allocation, in image and pod env": {ctr: ctr("p", nil, "LPU_VISIBLE_DEVICES=0,1", "HOME=/root", "LPU_VISIBLE_DEVICES=2"),
			reason: verify.ReasonBadValue, has: twice},
		"valid allocation, twice in env": {ctr: ctr("p", seal(t, nd.Key, "lpu3"), "LPU_VISIBLE_DEVICES=0", "LPU_VISIBLE_DEVICES=1"),
			reason: verify.ReasonBadValue, has: twice},
		"claim container, twice in env": {pod: pod("x", nil), ctr: withEnv(claimCtr("x", []string{"c2"}, 1), "LPU_VISIBLE_DEVICES=0", "LPU_VISIBLE_DEVICES=1"),
			reason: verify.ReasonBadValue, has: twice},
		"no allocation, once in image env": {ctr: ctr("p", nil, "LPU_VISIBLE_DEVICES=0,1", "HOME=/root"), vis: inject.VisibleNone},
		"no allocation, other-case and unset names are other variables": {
			ctr: ctr("p", nil, "lpu_visible_devices=0", "LPU_VISIBLE_DEVICES", "LPU_VISIBLE_DEVICES =1", "LPU_VISIBLE_DEVICES=2"), vis: inject.VisibleNone},
		"valid allocation overrides image env": {ctr: ctr("p", seal(t, nd.Key, "lpu3"), "LPU_VISIBLE_DEVICES=0,1,2,3,4,5,6,7", "PATH=/bin"), vis: "3"},
	})
}

func withEnv(c *api.Container, env ...string) *api.Container {
	c.Env = env
	return c
}

func TestSealedAllocation(t *testing.T) {
	nd, v := newVerifier(t, 8, false)
	otherNode, err := inject.NewKey(slices.Repeat([]byte{7}, inject.KeySize)) // nd.Key's secret
	if err != nil {
		t.Fatal(err)
	}
	if otherNode, err = otherNode.ForNode("node-2"); err != nil {
		t.Fatal(err)
	}
	sealed := func(value string) *api.Container { return ctr("p", seal(t, nd.Key, value)) }
	checkRule(t, v, verify.ErrSealedAllocation, map[string]ruleCase{
		"forged annotation without seal": {ctr: ctr("p", map[string]string{inject.AnnotationDevices: "lpu0,lpu1"}),
			reason: verify.ReasonBadSeal, has: "seal missing"},
		"seal made with another key": {ctr: ctr("p", seal(t, verifytest.Key(t, 9), "lpu0", "lpu1")),
			reason: verify.ReasonBadSeal, has: "does not match"},
		"seal without devices": {ctr: ctr("p", map[string]string{inject.AnnotationSeal: nd.Legacy.SealV1("lpu0")}),
			reason: verify.ReasonBadSeal, has: "without"},
		"sealed on another node with the same key": {ctr: ctr("p", seal(t, otherNode, "lpu0")),
			reason: verify.ReasonBadSeal, has: `on node "node-1" (sealed on another node, or forged)`},
		"legacy v1 seal": {ctr: ctr("p", nd.Legacy.AnnotationsV1([]string{"lpu0"})),
			reason: verify.ReasonBadSeal, has: "v1 seal (not bound to a node) no longer accepted: recreate the pod"},
		"path-like ID":      {ctr: sealed("../lpu0"), reason: verify.ReasonBadValue, has: "want lpuN"},
		"absolute path ID":  {ctr: sealed("/dev/lpu0"), reason: verify.ReasonBadValue, has: "want lpuN"},
		"duplicate IDs":     {ctr: sealed("lpu1,lpu2,lpu1"), reason: verify.ReasonBadValue, has: "duplicates"},
		"oversized value":   {ctr: sealed(strings.Repeat("lpu1,", 1000) + "lpu1"), reason: verify.ReasonBadValue, has: "limit"},
		"valid, ring order": {ctr: ctr("p", seal(t, nd.Key, "lpu7", "lpu0", "lpu1")), vis: "7,0,1"},
		"no allocation":     {ctr: ctr("p", map[string]string{"other.example.com/x": "y"}), vis: inject.VisibleNone},
	})
}

// TestLegacySeals: the v1 form (before node binding), with MACs that match
// under the node's key, is refused as a bad seal with or without an
// allocation ID, and the refusal wraps inject.ErrLegacySeal.
func TestLegacySeals(t *testing.T) {
	ids := []string{"lpu2", "lpu3"}
	nd, v := newVerifier(t, 8, false)
	withID, err := nd.Legacy.AnnotationsV1WithID(ids, inject.NewAllocationID())
	if err != nil {
		t.Fatal(err)
	}
	for form, ann := range map[string]map[string]string{"no ID": nd.Legacy.AnnotationsV1(ids), "with ID": withID} {
		_, alloc, err := v.Decide(context.Background(), pod("l", nil), ctr("l", ann))
		wantRefusal(t, err, verify.ErrSealedAllocation, verify.ReasonBadSeal, "no longer accepted")
		if !errors.Is(err, inject.ErrLegacySeal) || len(alloc.IDs) != 0 {
			t.Errorf("%s: Decide = %v, %v; want a refusal wrapping inject.ErrLegacySeal", form, alloc.IDs, err)
		}
	}
}

func TestKnownHealthy(t *testing.T) {
	nd, v := newVerifier(t, 8, true, withClaims(t))
	checkRule(t, v, verify.ErrKnownHealthy, map[string]ruleCase{
		"unknown ID": {ctr: ctr("p", seal(t, nd.Key, "lpu1", "lpu42")),
			reason: verify.ReasonUnknownDevice, has: `allocated device "lpu42" is not on this node (known: 8 LPUs)`},
		"unhealthy device": {ctr: ctr("p", seal(t, nd.Key, "lpu4", "lpu5")),
			reason: verify.ReasonUnhealthyDevice, has: `allocated device lpu5 is unhealthy: status "ECC_ERROR"`},
		"claim on an unhealthy device": {pod: pod("x", nil), ctr: claimCtr("x", []string{"c1"}, 4, 5, 6, 7),
			reason: verify.ReasonUnhealthyDevice, has: `claimed device lpu5 is unhealthy: status "ECC_ERROR"`},
		"known and healthy": {ctr: ctr("p", seal(t, nd.Key, "lpu4", "lpu6")), vis: "4,6"},
	})

	empty := inventory.New(device.NewSysfs(t.TempDir(), device.WithLogger(verifytest.Discard)), inventory.Options{Logger: verifytest.Discard})
	_, bare := newVerifier(t, 8, false, func(c *verify.Config) { c.Store = empty })
	_, _, err := bare.Decide(context.Background(), pod("p", nil), ctr("p", seal(t, nd.Key, "lpu0")))
	wantRefusal(t, err, verify.ErrKnownHealthy, verify.ReasonNoInventory, "no LPU inventory yet")
}

func TestNoOtherLPU(t *testing.T) {
	nd, v := newVerifier(t, 8, false, withClaims(t), func(c *verify.Config) { c.AllowNamespaces = []string{"node-agents"} })
	carrying := func(ns string, ids []string, devs []*api.LinuxDevice, rules ...*api.LinuxDeviceCgroup) (*api.PodSandbox, *api.Container) {
		p := pod("p", nil)
		p.Namespace = cmp.Or(ns, p.Namespace)
		var ann map[string]string
		if len(ids) > 0 {
			ann = seal(t, nd.Key, ids...)
		}
		c := ctr("p", ann)
		c.Linux = &api.LinuxContainer{Devices: devs, Resources: &api.LinuxResources{Devices: rules}}
		return p, c
	}
	allowAll := rule(true, "a", -1, -1, "rwm")
	privileged := &api.LinuxDeviceCgroup{Allow: true, Access: "rwm"}
	uNode := &api.LinuxDevice{Path: "/dev/accel0", Type: "u", Major: lpuMajor, Minor: 6}
	wild := ctrRules(rule(true, "c", lpuMajor, -1, "rw"))
	claimWild := claimCtr("x", []string{"c1"}, 4, 5, 6, 7)
	claimWild.Linux.Resources = &api.LinuxResources{Devices: wild}
	cases := map[string]ruleCase{
		"claim container carries another claim's LPU": {pod: pod("x", nil), ctr: claimCtr("x", []string{"c2"}, 1, 4),
			reason: verify.ReasonUnallocatedNodes, has: "container carries LPU device nodes it was not allocated (/dev/lpu4 (509:4, lpu4))"},
		"claim container, wildcard rule": {pod: pod("x", nil), ctr: claimWild,
			reason: verify.ReasonDeviceCgroup, has: "device cgroup admits LPUs it was not allocated (allocation lpu4,lpu5,lpu6,lpu7)"},
	}
	add := func(name string, p *api.PodSandbox, c *api.Container, reason, has, vis string) {
		cases[name] = ruleCase{pod: p, ctr: c, reason: reason, has: has, vis: vis}
	}
	nodes, cgroup := verify.ReasonUnallocatedNodes, verify.ReasonDeviceCgroup
	none := inject.VisibleNone
	p, c := carrying("", nil, []*api.LinuxDevice{lpuDev("/dev/lpu0", 0), lpuDev("/dev/lpu1", 1), {Path: "/dev/null", Type: "c", Major: 1, Minor: 3}}, privileged)
	add("privileged container carries every LPU", p, c, nodes,
		"privileged container carries LPU device nodes it was not allocated (/dev/lpu0 (509:0, lpu0), /dev/lpu1 (509:1, lpu1))", "")
	p, c = carrying("node-agents", nil, []*api.LinuxDevice{lpuDev("/dev/lpu0", 0), lpuDev("/dev/lpu1", 1)}, privileged)
	add("privileged node agent in an allowlisted namespace", p, c, "", "", none)
	p, c = carrying("", []string{"lpu1"}, []*api.LinuxDevice{lpuDev("/dev/lpu6", 6), lpuDev("/dev/accel1", 1)})
	add("an LPU node it was not allocated", p, c, nodes, "container carries LPU device nodes it was not allocated (/dev/lpu6 (509:6, lpu6))", "")
	p, c = carrying("", []string{"lpu1"}, []*api.LinuxDevice{lpuDev("/dev/accel1", 1)})
	add("its allocated LPU under another path", p, c, "", "", "1")
	p, c = carrying("", []string{"lpu1"}, []*api.LinuxDevice{uNode})
	add("an unbuffered char node (type u)", p, c, nodes, "carries LPU device nodes it was not allocated (/dev/accel0 (509:6, lpu6))", "")
	p, c = carrying("", nil, []*api.LinuxDevice{uNode})
	add("a u node without allocation", p, c, nodes, "(/dev/accel0 (509:6, lpu6))", "")
	// The device cgroup decides what the container can open, not its
	// nodes: with CAP_MKNOD it can make the node.
	for name, tc := range map[string]struct {
		ns    string
		ids   []string
		rules []*api.LinuxDeviceCgroup
		has   string // "" admitted
		vis   string // admitted: LPU_VISIBLE_DEVICES
	}{
		"containerd's default rules": {rules: ctrRules(), vis: none},
		"only its own LPUs allowed": {ids: []string{"lpu2", "lpu3"},
			rules: ctrRules(rule(true, "c", lpuMajor, 2, "rw"), rule(true, "c", lpuMajor, 3, "rw")), vis: "2,3"},
		"wildcard minor on the LPU major, no node": {rules: ctrRules(rule(true, "c", lpuMajor, -1, "rwm")),
			has: "device cgroup admits LPUs it was not allocated (allocation none): 509:0 (lpu0) rwm, 509:1 (lpu1) rwm"},
		"wildcard minor, allocated lpu2": {ids: []string{"lpu2"}, rules: wild,
			has: "device cgroup admits LPUs it was not allocated (allocation lpu2)"},
		"another LPU's number":    {ids: []string{"lpu2"}, rules: ctrRules(rule(true, "c", lpuMajor, 5, "r")), has: "509:5 (lpu5) r"},
		"mknod only still admits": {rules: ctrRules(rule(true, "c", -1, -1, "m")), has: "device cgroup admits LPUs"},
		"allow-all (privileged_without_host_devices_all_devices_allowed)": {rules: []*api.LinuxDeviceCgroup{allowAll},
			has: "509:7 (lpu7) rwm, other minors of major 509, the LPU driver's (509:8 rwm)"},
		"allow-all after containerd's deny-all": {ids: []string{"lpu1"}, rules: ctrRules(rule(true, "", -1, -1, "rwm")),
			has: "device cgroup admits LPUs"},
		"allow-all in an allowlisted namespace": {ns: "node-agents", rules: []*api.LinuxDeviceCgroup{allowAll}, vis: none},
		"allow-all then the LPU major denied":   {rules: []*api.LinuxDeviceCgroup{allowAll, rule(false, "c", lpuMajor, -1, "rwm")}, vis: none},
		"wildcard allow then deny-all last": {
			rules: []*api.LinuxDeviceCgroup{rule(true, "c", lpuMajor, -1, "rwm"), rule(false, "a", -1, -1, "rwm")}, vis: none},
	} {
		p, c := carrying(tc.ns, tc.ids, nil, tc.rules...)
		reason := cgroup
		if tc.has == "" {
			reason = ""
		}
		add("cgroup: "+name, p, c, reason, tc.has, tc.vis)
	}
	checkRule(t, v, verify.ErrNoOtherLPU, cases)
}

// TestReplayLedger: the allocation ID belongs to the first pod that used
// it. Restarts of its containers and its other containers keep working;
// another pod presenting the same sealed annotations is refused, also
// after lpu-nri restarts (the ledger is on disk).
func TestReplayLedger(t *testing.T) {
	state := t.TempDir()
	withLedger := func(c *verify.Config) {
		l, err := ledger.Open(state)
		if err != nil {
			t.Fatal(err)
		}
		c.Ledger = l
	}
	nd, v := newVerifier(t, 8, false, withLedger)
	ctx := context.Background()
	victim, thief := pod("victim", nil), pod("thief", nil)
	ann := seal(t, nd.Key, "lpu4", "lpu5")
	initAnn := seal(t, nd.Key, "lpu4", "lpu5") // kubelet reuses the init container's devices
	for i, c := range []*api.Container{ctr("victim", initAnn), ctr("victim", ann), ctr("victim", ann), ctr("victim", ann)} {
		if _, _, err := v.Decide(ctx, victim, c); err != nil {
			t.Fatalf("victim's container %d (init, app, restarts): %v", i, err)
		}
	}
	_, _, err := v.Decide(ctx, thief, ctr("thief", ann))
	wantRefusal(t, err, verify.ErrReplayLedger, verify.ReasonReplayed, "already used by another pod")
	if !errors.Is(err, ledger.ErrOtherPod) || !strings.Contains(err.Error(), victim.GetUid()) {
		t.Fatalf("replay in another pod: %v, want ledger.ErrOtherPod naming %s", err, victim.GetUid())
	}

	_, restarted := newVerifier(t, 8, false, withLedger) // the same node key
	_, _, err = restarted.Decide(ctx, thief, ctr("thief", ann))
	wantRefusal(t, err, verify.ErrReplayLedger, verify.ReasonReplayed, "already used by another pod")
	if _, _, err := restarted.Decide(ctx, victim, ctr("victim", ann)); err != nil {
		t.Fatalf("victim's restart after lpu-nri restart: %v", err)
	}
}

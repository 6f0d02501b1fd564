// Package verifytest is the test kit of lpu-nri's trust rules: a node of
// fake LPUs (a real file tree, a refreshed inventory, a replay ledger, a
// seal key bound to the node) and the pods and containers the rules judge,
// shared by the tests of verify and of the NRI adapter.
package verifytest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"

	"github.com/containerd/nri/pkg/api"

	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/inventory"
	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/ledger"
	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/verify"
	"github.com/hyperaccel/lpu-node/internal/dracheckpoint"
	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/device/devicetest"
	"github.com/hyperaccel/lpu-node/pkg/inject"
	"github.com/hyperaccel/lpu-node/pkg/inject/injecttest"
)

// NodeName is the node the test keys are bound to.
const NodeName = "node-1"

// Discard is a logger that drops everything.
var Discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// Key returns a seal key of bytes b bound to NodeName.
func Key(t testing.TB, b byte) *inject.Key {
	t.Helper()
	k, err := inject.NewKey(slices.Repeat([]byte{b}, inject.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	if k, err = k.ForNode(NodeName); err != nil {
		t.Fatal(err)
	}
	return k
}

// LegacyKey is Key(t, b) as a writer of the v1 form, which only device
// plugins before node binding wrote and lpu-nri refuses.
func LegacyKey(t testing.TB, b byte) *injecttest.Key {
	t.Helper()
	k, err := injecttest.NewKey(slices.Repeat([]byte{b}, inject.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	if k, err = k.ForNode(NodeName); err != nil {
		t.Fatal(err)
	}
	return k
}

// Seal returns the four annotations the device plugin writes (v2 seals,
// a fresh allocation ID) for ids, joined as the devices value.
func Seal(t testing.TB, k *inject.Key, ids ...string) map[string]string {
	t.Helper()
	ann, err := k.AnnotationsWithID(ids, inject.NewAllocationID())
	if err != nil {
		t.Fatal(err)
	}
	return ann
}

// Pod returns pod name (sandbox "pod-<name>", UID "uid-<name>") in
// namespace "team".
func Pod(name string, ann map[string]string) *api.PodSandbox {
	return &api.PodSandbox{Id: "pod-" + name, Name: name, Uid: "uid-" + name, Namespace: "team", Annotations: ann}
}

// Ctr returns container name ("ctr-<name>") of Pod(name).
func Ctr(name string, ann map[string]string, env ...string) *api.Container {
	return &api.Container{Id: "ctr-" + name, PodSandboxId: "pod-" + name, Name: name, Annotations: ann, Env: env}
}

// Node is a fake LPU node for the rules.
type Node struct {
	Root   string           // the device tree
	Key    *inject.Key      // Key(t, 7)
	Legacy *injecttest.Key  // LegacyKey(t, 7): Key's secret, writing the v1 form
	Store  *inventory.Store // refreshed once
	Ledger *ledger.Ledger   // in a temp dir
}

// NewNode returns a node of n LPUs, lpu5 unhealthy when sick is set.
func NewNode(t testing.TB, n int, sick bool) *Node {
	t.Helper()
	rows := make([]devicetest.Row, n)
	for i := range rows {
		rows[i] = devicetest.Row{Index: i}
		if sick && i == 5 {
			rows[i].Status = "ECC_ERROR"
		}
	}
	nd := &Node{Root: devicetest.NewTree(t, rows...), Key: Key(t, 7), Legacy: LegacyKey(t, 7)}
	nd.Store = inventory.New(device.NewSysfs(nd.Root, device.WithLogger(Discard)), inventory.Options{Logger: Discard})
	if _, err := nd.Store.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	led, err := ledger.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	nd.Ledger = led
	return nd
}

// Config returns the rules' parts on the node: its key, inventory and
// ledger, and /usr/lib/lpu as the driver mount.
func (nd *Node) Config() verify.Config {
	return verify.Config{Key: nd.Key, Store: nd.Store, Log: Discard, Ledger: nd.Ledger,
		Options: inject.Options{Mounts: []inject.Mount{{HostPath: "/usr/lib/lpu"}}}}
}

// Arcs returns n distinct allocations on one ring of size devices: arcs of
// 1..4 devices starting at every position.
func Arcs(size, n int) [][]string {
	var out [][]string
	for l := 1; len(out) < n; l++ {
		for s := 0; s < size && len(out) < n; s++ {
			ids := make([]string, l)
			for i := range ids {
				ids[i] = device.ID((s + i) % size)
			}
			out = append(out, ids)
		}
	}
	return out
}

// LPUDev is a character device node of the LPU driver's major.
func LPUDev(path string, minor int64) *api.LinuxDevice {
	return &api.LinuxDevice{Path: path, Type: "c", Major: device.DefaultMajor, Minor: minor}
}

// CgroupRule is an OCI device cgroup rule; major or minor < 0 is a
// wildcard.
func CgroupRule(allow bool, typ string, major, minor int64, access string) *api.LinuxDeviceCgroup {
	r := &api.LinuxDeviceCgroup{Allow: allow, Type: typ, Access: access}
	if major >= 0 {
		r.Major = api.Int64(major)
	}
	if minor >= 0 {
		r.Minor = api.Int64(minor)
	}
	return r
}

// ContainerdRules are the rules containerd gives an unprivileged
// container: deny everything, then the default devices and /dev/pts.
func ContainerdRules(extra ...*api.LinuxDeviceCgroup) []*api.LinuxDeviceCgroup {
	rules := []*api.LinuxDeviceCgroup{
		CgroupRule(false, "", -1, -1, "rwm"),
		CgroupRule(true, "c", 1, 3, "rwm"), CgroupRule(true, "c", 1, 5, "rwm"),
		CgroupRule(true, "c", 1, 8, "rwm"), CgroupRule(true, "c", 1, 9, "rwm"),
		CgroupRule(true, "c", 5, 0, "rwm"), CgroupRule(true, "c", 5, 1, "rwm"),
		CgroupRule(true, "c", 136, -1, "rwm"), CgroupRule(true, "c", 10, 200, "rwm"),
	}
	return append(rules, extra...)
}

// ClaimCtr is a container of pod name whose CDI devices name the claims
// and whose pristine devices (the claims' CDI specs, applied by the
// runtime) are the LPU nodes of minors.
func ClaimCtr(name string, claims []string, minors ...int64) *api.Container {
	c := Ctr(name, nil)
	for _, uid := range claims {
		c.CDIDevices = append(c.CDIDevices, &api.CDIDevice{Name: inject.ClaimDeviceID(uid)})
	}
	c.Linux = &api.LinuxContainer{}
	for _, m := range minors {
		c.Linux.Devices = append(c.Linux.Devices, LPUDev(fmt.Sprintf("/dev/lpu%d", m), m))
	}
	return c
}

// Claim is a claim lpu-dra prepared on the LPUs lpus for pods (UIDs), in
// namespace "team".
func Claim(uid string, lpus []string, pods ...string) dracheckpoint.Claim {
	return dracheckpoint.Claim{UID: uid, Namespace: "team", Name: "lpus-" + uid, LPUs: lpus,
		Devices:   []dracheckpoint.Device{{Request: "lpus", Pool: "node-a", Device: "ring0-" + uid}},
		CDIDevice: inject.ClaimDeviceID(uid), SpecName: "lpu.hyperaccel.ai-claim_" + uid + ".json", Pods: pods}
}

// WriteClaims writes lpu-dra's checkpoint of claims to the state dir dir
// (over any earlier one) and returns Config.Claims reading it.
func WriteClaims(t testing.TB, dir string, claims ...dracheckpoint.Claim) func(string, []string) ([]string, error) {
	t.Helper()
	state := &dracheckpoint.State{Claims: map[string]dracheckpoint.Claim{}}
	for _, c := range claims {
		state.Claims[c.UID] = c
	}
	if err := dracheckpoint.Save(dir, state); err != nil {
		t.Fatal(err)
	}
	return func(pod string, uids []string) ([]string, error) { return dracheckpoint.PodLPUs(dir, pod, uids) }
}

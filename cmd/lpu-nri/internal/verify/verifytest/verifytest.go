// Package verifytest is the test kit of lpu-nri's trust rules: a node of
// fake LPUs (a real file tree, a refreshed inventory, a replay ledger, a
// seal key bound to the node) and the pods and containers the rules judge,
// shared by the tests of verify and of the NRI adapter.
package verifytest

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"testing"

	"github.com/containerd/nri/pkg/api"

	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/inventory"
	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/ledger"
	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/verify"
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
// plugins before node binding wrote (security.acceptLegacySeals).
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

package publish

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/hyperaccel/lpu-node/cmd/lpu-dra/internal/state"
	checkpoint "github.com/hyperaccel/lpu-node/internal/dracheckpoint"
	"github.com/hyperaccel/lpu-node/internal/health"
	"github.com/hyperaccel/lpu-node/pkg/alloc"
	"github.com/hyperaccel/lpu-node/pkg/arcslice"
	"github.com/hyperaccel/lpu-node/pkg/device"
)

const node = "node-a"

// static is a fixed device state.
type static struct {
	mu   sync.Mutex
	snap health.Snapshot
}

func newStatic(t testing.TB, inv *device.Inventory) *static {
	l, err := alloc.NewLayout(inv.Rings)
	if err != nil {
		t.Fatal(err)
	}
	return &static{snap: health.Snapshot{Inventory: inv, Layout: l, Generation: 1}}
}

func (s *static) Snapshot() (health.Snapshot, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snap, nil
}

func ring8() *device.Inventory {
	inv := &device.Inventory{DriverVersion: "1.4.2"}
	var ring []string
	for i := 0; i < 8; i++ {
		inv.Devices = append(inv.Devices, device.Device{ID: device.ID(i), Index: i, Path: fmt.Sprintf("/dev/lpu%d", i),
			Major: 240, Minor: int64(i), Health: device.Health{Healthy: true}})
		ring = append(ring, device.ID(i))
	}
	inv.Rings = [][]string{ring}
	return inv
}

// devicePlugin is the device-plugin view: answered (held lists what its
// pods hold) or not yet.
type devicePlugin struct {
	unanswered bool
	held       []string
}

func (d *devicePlugin) Known() bool    { return !d.unanswered }
func (d *devicePlugin) Held() []string { return d.held }

// env is a state and a publisher on one node's directories.
type env struct {
	t        testing.TB
	stateDir string
	cdiDir   string
	devices  state.Devices
	dp       devicePlugin
	st       *state.State
	p        *Publisher
	arcSizes []int
	labels   LabelSetter
}

func newEnv(t testing.TB, devices state.Devices) *env {
	e := &env{t: t, stateDir: t.TempDir(), cdiDir: filepath.Join(t.TempDir(), "cdi"), devices: devices}
	e.restart()
	return e
}

// restart builds a new state and publisher on the same directories, as a
// new process.
func (e *env) restart() {
	e.t.Helper()
	st, err := state.New(e.devices, state.Options{StateDir: e.stateDir, CDIDir: e.cdiDir})
	if err != nil {
		e.t.Fatal(err)
	}
	e.st = st
	e.p = New(e.devices, st, &e.dp, Options{NodeName: node, ArcSizes: e.arcSizes, NodeLabels: e.labels})
}

func arc(start, size int) alloc.Arc { return alloc.Arc{Ring: 0, Start: start, Size: size} }

// prepare prepares claim uid with arcs of this node's pool.
func (e *env) prepare(uid string, arcs ...alloc.Arc) error {
	e.t.Helper()
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "claim-" + uid, Namespace: "default", UID: types.UID(uid)}}
	var devs []checkpoint.Device
	for _, a := range arcs {
		devs = append(devs, checkpoint.Device{Request: "lpus", Pool: node, Device: arcslice.DeviceName(a)})
	}
	_, _, err := e.st.Prepare(context.Background(), state.Request{Claim: c, Devices: devs})
	return err
}

func (e *env) unprepare(uid string) error {
	e.t.Helper()
	_, err := e.st.Unprepare(context.Background(), uid)
	return err
}

// publishedArcs is every device of the node's pool now, in order.
func publishedArcs(t *testing.T, e *env) []alloc.Arc {
	t.Helper()
	res, err := e.p.Resources()
	if err != nil {
		t.Fatal(err)
	}
	var out []alloc.Arc
	for _, sl := range res.Pools[node].Slices {
		for _, d := range sl.Devices {
			a, err := arcslice.ParseDeviceName(d.Name)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, a)
		}
	}
	return out
}

// free8 counts the arcs of a ring of 8 clear of the held positions.
func free8(held ...int) int {
	n := 0
	for size := 1; size <= 8; size++ {
		starts := 8
		if size == 8 {
			starts = 1
		}
		for s := 0; s < starts; s++ {
			clear := true
			for i := 0; i < size; i++ {
				if slices.Contains(held, (s+i)%8) {
					clear = false
				}
			}
			if clear {
				n++
			}
		}
	}
	return n
}

// sink counts the publications it was handed.
type sink struct {
	mu sync.Mutex
	n  int
}

func (s *sink) PublishResources(context.Context, resourceslice.DriverResources) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	return nil
}

func (s *sink) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

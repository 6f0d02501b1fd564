package publish

import (
	"context"
	"path/filepath"
	"sync"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/hyperaccel/lpu-node/cmd/lpu-dra/internal/faults"
	"github.com/hyperaccel/lpu-node/cmd/lpu-dra/internal/state"
	checkpoint "github.com/hyperaccel/lpu-node/internal/dracheckpoint"
	"github.com/hyperaccel/lpu-node/pkg/alloc"
	"github.com/hyperaccel/lpu-node/pkg/arcslice"
	"github.com/hyperaccel/lpu-node/pkg/arcslice/arcslicetest"
)

const node = "node-a"

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
	faults   *faults.Log
	cordoned Cordon
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
	e.p = New(e.devices, st, &e.dp, Options{NodeName: node, ArcSizes: e.arcSizes, NodeLabels: e.labels, Faults: e.faults, Cordoned: e.cordoned})
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
	res, err := e.p.Resources()
	return arcslicetest.Arcs(t, res, err, node)
}

// free8 counts the arcs of a ring of 8 clear of the held positions.
func free8(held ...int) int { return arcslicetest.FreeArcs(8, held...) }

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

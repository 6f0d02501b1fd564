package driver

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/hyperaccel/lpu-node/cmd/lpu-dra/internal/publish"
	"github.com/hyperaccel/lpu-node/pkg/alloc"
	"github.com/hyperaccel/lpu-node/pkg/arcslice"
	"github.com/hyperaccel/lpu-node/pkg/inject"
)

const node = "node-a"

type env struct {
	t        testing.TB
	stateDir string
	cdiDir   string
	devices  Devices
	d        *Driver
	metrics  *Metrics
	arcSizes []int
	classes  []string       // the driver's Options.DeviceClasses
	labels   LabelSetter    // the driver's Options.NodeLabels
	cordoned publish.Cordon // the driver's Options.Cordoned
}

func newEnv(t testing.TB, devices Devices) *env {
	e := &env{t: t, stateDir: t.TempDir(), cdiDir: filepath.Join(t.TempDir(), "cdi"), devices: devices}
	e.restart()
	return e
}

// restart builds a new driver on the same directories, as a new process.
func (e *env) restart() {
	e.t.Helper()
	e.metrics = NewMetrics(node)
	d, err := New(e.devices, Options{NodeName: node, StateDir: e.stateDir, CDIDir: e.cdiDir,
		Inject: inject.Options{Mounts: []inject.Mount{{HostPath: "/usr/lib/lpu"}}}, ArcSizes: e.arcSizes, DeviceClasses: e.classes, Metrics: e.metrics, NodeLabels: e.labels, Cordoned: e.cordoned})
	if err != nil {
		e.t.Fatal(err)
	}
	d.Heal()
	e.d = d
}

type alloced struct {
	pool, device, request string
}

func claim(uid string, results ...alloced) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "claim-" + uid, Namespace: "default", UID: types.UID(uid)},
		Status: resourceapi.ResourceClaimStatus{
			Allocation:  &resourceapi.AllocationResult{},
			ReservedFor: []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "pod-" + uid, UID: types.UID("pod-uid-" + uid)}},
		},
	}
	for _, r := range results {
		driver := inject.Driver
		if r.pool == "gpu" {
			driver = "gpu.example.com"
		}
		req := r.request
		if req == "" {
			req = "lpus"
		}
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results,
			resourceapi.DeviceRequestAllocationResult{Request: req, Driver: driver, Pool: r.pool, Device: r.device})
	}
	return c
}

func arc(start, size int) alloced {
	return alloced{pool: node, device: arcslice.DeviceName(alloc.Arc{Ring: 0, Start: start, Size: size})}
}

func (e *env) prepare(c *resourceapi.ResourceClaim) kubeletplugin.PrepareResult {
	e.t.Helper()
	res, err := e.d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{c})
	if err != nil {
		e.t.Fatal(err)
	}
	r, ok := res[c.UID]
	if !ok || len(res) != 1 {
		e.t.Fatalf("result %v has no entry for %s", res, c.UID)
	}
	return r
}

func (e *env) unprepare(uid string) error {
	e.t.Helper()
	res, err := e.d.UnprepareResourceClaims(context.Background(), []kubeletplugin.NamespacedObject{
		{NamespacedName: types.NamespacedName{Namespace: "default", Name: "claim-" + uid}, UID: types.UID(uid)}})
	if err != nil {
		e.t.Fatal(err)
	}
	return res[types.UID(uid)]
}

// injected resolves a claim's CDI device through the CDI library from the
// spec dir and returns the container edits it applies.
func (e *env) injected(uid string) (nodes, env, mounts []string) {
	e.t.Helper()
	cache, err := cdi.NewCache(cdi.WithSpecDirs(e.cdiDir), cdi.WithAutoRefresh(false))
	if err != nil {
		e.t.Fatal(err)
	}
	dev := cache.GetDevice(inject.ClaimDeviceID(uid))
	if dev == nil {
		e.t.Fatalf("CDI device %s not resolvable: %v", inject.ClaimDeviceID(uid), cache.GetErrors())
	}
	for _, n := range dev.ContainerEdits.DeviceNodes {
		nodes = append(nodes, n.Path)
	}
	for _, m := range dev.ContainerEdits.Mounts {
		mounts = append(mounts, m.HostPath+":"+strings.Join(m.Options, ","))
	}
	return nodes, dev.ContainerEdits.Env, mounts
}

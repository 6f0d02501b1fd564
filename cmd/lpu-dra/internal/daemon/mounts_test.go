package daemon

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/hyperaccel/lpu-node/cmd/lpu-dra/internal/driver"
	"github.com/hyperaccel/lpu-node/config"
	"github.com/hyperaccel/lpu-node/internal/health"
	"github.com/hyperaccel/lpu-node/internal/node"
	"github.com/hyperaccel/lpu-node/pkg/alloc"
	"github.com/hyperaccel/lpu-node/pkg/arcslice"
	"github.com/hyperaccel/lpu-node/pkg/device/devicesim"
	"github.com/hyperaccel/lpu-node/pkg/inject"
)

// TestSimulatedClaimMountsStayInTree pins the simulated-mount rule for
// lpu-dra: on a simulated root a prepared claim's CDI spec bind-mounts the
// simulated tree's driver library and tool, never the host's, even when
// the host has the same paths (the tree lpu-nri and the device plugin
// see; internal/node's TestInjectOptionsSimulated pins the rule there).
func TestSimulatedClaimMountsStayInTree(t *testing.T) {
	dir := t.TempDir()
	cfg := config.Default()
	cfg.Root = filepath.Join(dir, "host")
	cfg.StateDir = filepath.Join(dir, "state")
	cfg.CDI.SpecDir = filepath.Join(dir, "cdi")
	cfg.Injection.Mounts = []config.Mount{{HostPath: devicesim.LibDir, ContainerPath: devicesim.LibDir},
		{HostPath: devicesim.Tool, ContainerPath: devicesim.Tool}}
	// The host has both paths too: the old code mounted these.
	for _, f := range []string{devicesim.Library, devicesim.Tool} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(cfg.Root, f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(cfg.Root, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	simulate(t, cfg, 8)
	n, err := node.Open(cfg, node.Options{Name: "node-a"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	mon := health.New(n.Discoverer, n.HealthOptions())
	go func() { _ = mon.Run(ctx) }()
	<-mon.Ready()
	drv, err := driver.New(mon, driverOptions(n, "node-a", nil, nil, nil))
	if err != nil {
		t.Fatal(err)
	}

	uid := "0b5c7a8e"
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "default", UID: types.UID(uid)},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "lpus",
			Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "lpu-arc-2.hyperaccel.ai"}}}}},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
			Results: []resourceapi.DeviceRequestAllocationResult{{Request: "lpus", Driver: inject.Driver, Pool: "node-a",
				Device: arcslice.DeviceName(alloc.Arc{Ring: 0, Start: 0, Size: 2})}}}}},
	}
	res, err := drv.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{claim})
	if err != nil || res[claim.UID].Err != nil {
		t.Fatalf("prepare: %v %v", err, res[claim.UID].Err)
	}
	specFiles, _ := filepath.Glob(filepath.Join(cfg.CDI.SpecDir, "*"+uid+"*.json"))
	if len(specFiles) != 1 {
		t.Fatalf("claim specs %v, want one", specFiles)
	}
	data, err := os.ReadFile(specFiles[0])
	if err != nil {
		t.Fatal(err)
	}
	var spec specs.Spec
	if err := json.Unmarshal(data, &spec); err != nil {
		t.Fatal(err)
	}
	var mounts []*specs.Mount
	for _, d := range spec.Devices {
		mounts = append(mounts, d.ContainerEdits.Mounts...)
	}
	mounts = append(mounts, spec.ContainerEdits.Mounts...)
	if len(mounts) != 2 {
		t.Fatalf("claim spec mounts %d, want the library and the tool: %s", len(mounts), data)
	}
	for _, m := range mounts {
		if !strings.HasPrefix(m.HostPath, n.Root+"/") {
			t.Errorf("claim spec mounts %s (into %s) from outside the simulated tree %s", m.HostPath, m.ContainerPath, n.Root)
		}
	}
}

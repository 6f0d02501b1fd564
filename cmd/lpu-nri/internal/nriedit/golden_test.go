package nriedit

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/inject"
	"github.com/hyperaccel/lpu-node/pkg/inject/injecttest"
)

var update = flag.Bool("update", false, "rewrite the NRI golden files in testdata")

// injectTestdata holds pkg/inject's golden CDI specs: the device sets
// (injecttest.GoldenLayouts, pkg/inject's own) must render to them byte
// for byte here too (never rewritten from here).
const injectTestdata = "../../../../pkg/inject/testdata"

// TestGolden renders one device set to the NRI adjustment (this package's
// golden file) and to the CDI spec (pkg/inject's golden file), and fails
// on a temp-dir path leaking into either.
func TestGolden(t *testing.T) {
	for layout, l := range injecttest.GoldenLayouts() {
		t.Run(layout, func(t *testing.T) { testGolden(t, l.Setup, l.Suffix) })
	}
}

func testGolden(t *testing.T, setup func(testing.TB) (string, *device.Inventory, []device.Device, inject.Options), suffix string) {
	root, inv, devs, opts := setup(t)
	adj := Adjustment(inject.ForDevices(devs, inv.DriverVersion, opts))
	spec, err := inject.Spec(inv, opts)
	if err != nil {
		t.Fatal(err)
	}
	outputs := map[string]struct {
		v        any
		dir      string
		writable bool
	}{
		"nri-adjustment" + suffix + ".golden.json": {adj, "testdata", true},
		"cdi-spec" + suffix + ".golden.json":       {spec, injectTestdata, false},
	}
	for name, o := range outputs {
		t.Run(name, func(t *testing.T) {
			got := injecttest.GoldenJSON(t, root, o.v)
			path := filepath.Join(o.dir, name)
			if *update && o.writable {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -run TestGolden -update)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s differs from golden %s (rerun with -update if intended; pkg/inject's own golden test rewrites CDI specs):\n%s", name, path, got)
			}
		})
	}
}

// TestNRIAndCDIAgree applies both renderings of the same allocation to an
// OCI spec — the NRI adjustment through the NRI api's own OCI conversions,
// the CDI spec through a real CDI cache — and requires the same device
// nodes, device numbers, cgroup access, mounts and env.
func TestNRIAndCDIAgree(t *testing.T) {
	for layout, l := range injecttest.GoldenLayouts() {
		t.Run(layout, func(t *testing.T) { testNRIAndCDIAgree(t, l.Setup, l.IDs) })
	}
}

// loadSpec writes inv's CDI spec as lpu-nri's CDI mode does and loads it
// in a real CDI cache.
func loadSpec(t *testing.T, inv *device.Inventory, opts inject.Options) *cdi.Cache {
	t.Helper()
	dir := t.TempDir()
	s, err := inject.Spec(inv, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := inject.WriteSpec(dir, s); err != nil {
		t.Fatal(err)
	}
	cache, err := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	return cache
}

func testNRIAndCDIAgree(t *testing.T, setup func(testing.TB) (string, *device.Inventory, []device.Device, inject.Options), ids []string) {
	_, inv, devs, opts := setup(t)

	// NRI side.
	adj := Adjustment(inject.ForDevices(devs, inv.DriverVersion, opts))
	var nriDevs []oci.LinuxDevice
	var nriAccess []string
	for _, d := range adj.GetLinux().GetDevices() {
		nriDevs = append(nriDevs, d.ToOCI())
		nriAccess = append(nriAccess, d.AccessString())
	}
	var nriMounts []oci.Mount
	for _, m := range adj.GetMounts() {
		nriMounts = append(nriMounts, m.ToOCI(nil))
	}
	var nriEnv []string
	for _, kv := range adj.GetEnv() {
		nriEnv = append(nriEnv, kv.Key+"="+kv.Value)
	}

	// CDI side: the spec lpu-nri writes, the names and env the device
	// plugin returns in CDI mode.
	cache := loadSpec(t, inv, opts)
	env, err := inject.AllocationEnv(ids)
	if err != nil {
		t.Fatal(err)
	}
	cdiSpec := &oci.Spec{Process: &oci.Process{Env: []string{
		inject.EnvVisibleDevices + "=" + env[inject.EnvVisibleDevices], inject.EnvNumDevices + "=" + env[inject.EnvNumDevices]}}, Linux: &oci.Linux{}}
	if _, err := cache.InjectDevices(cdiSpec, inject.CDIDeviceNames(ids)...); err != nil {
		t.Fatalf("InjectDevices: %v", err)
	}

	var want []device.Node // every node of every LPU, ring order, primary first
	for _, d := range devs {
		want = append(want, d.NodeList()...)
	}
	if len(nriDevs) != len(want) || len(cdiSpec.Linux.Devices) != len(want) {
		t.Fatalf("NRI %d devices, CDI %d, want %d", len(nriDevs), len(cdiSpec.Linux.Devices), len(want))
	}
	for i, n := range nriDevs {
		c := cdiSpec.Linux.Devices[i]
		if n.Path != c.Path || n.Type != c.Type || n.Major != c.Major || n.Minor != c.Minor || *n.FileMode != *c.FileMode {
			t.Errorf("device %d: NRI %+v, CDI %+v", i, n, c)
		}
		d := want[i]
		if n.Path != d.Path || n.Major != d.Major || n.Minor != d.Minor {
			t.Errorf("device %d: NRI %+v, discovered %+v", i, n, d)
		}
		rule := cdiSpec.Linux.Resources.Devices[i]
		// CDI allows "rwm"; NRI's generator allows AccessString() ("rw"),
		// mknod is pointless inside a container that already has the node.
		if !rule.Allow || *rule.Major != n.Major || *rule.Minor != n.Minor || !strings.HasPrefix(rule.Access, nriAccess[i]) {
			t.Errorf("cgroup rule %d: CDI %+v, NRI access %q", i, rule, nriAccess[i])
		}
	}
	if len(nriMounts) != len(cdiSpec.Mounts) {
		t.Fatalf("NRI mounts %+v, CDI mounts %+v", nriMounts, cdiSpec.Mounts)
	}
	byDest := map[string]oci.Mount{} // CDI sorts mounts by depth
	for _, m := range cdiSpec.Mounts {
		byDest[m.Destination] = m
	}
	for _, n := range nriMounts {
		c := byDest[n.Destination]
		if n.Source != c.Source || n.Type != c.Type || !slices.Equal(n.Options, c.Options) {
			t.Errorf("mount %s: NRI %+v, CDI %+v", n.Destination, n, c)
		}
	}
	if !slices.Equal(nriEnv, cdiSpec.Process.Env) {
		t.Errorf("env: NRI %q, CDI %q", nriEnv, cdiSpec.Process.Env)
	}
	visible, _ := inject.VisibleDevices(ids)
	if nriEnv[0] != inject.EnvVisibleDevices+"="+visible || nriEnv[1] != inject.EnvNumDevices+"="+strconv.Itoa(len(ids)) {
		t.Errorf("env %q, want %s=%s (ring order) then %s=%d", nriEnv, inject.EnvVisibleDevices, visible, inject.EnvNumDevices, len(ids))
	}
}

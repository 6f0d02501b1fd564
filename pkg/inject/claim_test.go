package inject

import (
	"reflect"
	"slices"
	"testing"

	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/hyperaccel/lpu-node/pkg/device"
)

func TestClaimSpec(t *testing.T) {
	devs := []device.Device{
		{ID: "lpu7", Index: 7, Path: "/dev/lpu7", Major: 240, Minor: 7},
		{ID: "lpu0", Index: 0, Path: "/dev/lpu0", Major: 240, Minor: 0},
	}
	e := ForDevices(devs, "1.4.2", Options{Mounts: []Mount{{HostPath: "/usr/lib/lpu"}}})
	s, err := ClaimSpec("0b5c7a8e-1111-2222-3333-444455556666", e)
	if err != nil {
		t.Fatal(err)
	}
	if s.Kind != ClaimKind || len(s.Devices) != 1 || s.Devices[0].Name != "0b5c7a8e-1111-2222-3333-444455556666" {
		t.Fatalf("spec kind %q devices %+v", s.Kind, s.Devices)
	}
	ce := s.Devices[0].ContainerEdits
	if got := []string{ce.DeviceNodes[0].Path, ce.DeviceNodes[1].Path}; !reflect.DeepEqual(got, []string{"/dev/lpu7", "/dev/lpu0"}) {
		t.Fatalf("device nodes %v, want ring order", got)
	}
	if ce.Env[0] != "LPU_VISIBLE_DEVICES=7,0" || !slices.Contains(ce.Env, "LPU_DRIVER_VERSION=1.4.2") {
		t.Fatalf("env %v", ce.Env)
	}
	if len(ce.Mounts) != 1 || ce.Mounts[0].Options[0] != "ro" {
		t.Fatalf("mounts %+v", ce.Mounts)
	}
	// The lowest version taking a device name that starts with a digit
	// (a claim UID) is 0.5.0.
	if s.Version != "0.5.0" {
		t.Fatalf("cdiVersion %s, want the lowest, 0.5.0", s.Version)
	}
	// The CDI library accepts and resolves it.
	dir := t.TempDir()
	cache, err := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	if err := cache.WriteSpec(s, cdi.GenerateTransientSpecName(Driver, ClaimClass, "0b5c7a8e")); err != nil {
		t.Fatalf("cdi rejects the claim spec: %v", err)
	}
	if err := cache.Refresh(); err != nil {
		t.Fatal(err)
	}
	if cache.GetDevice(ClaimDeviceID("0b5c7a8e-1111-2222-3333-444455556666")) == nil {
		t.Fatalf("cdi does not resolve %s: %v", ClaimDeviceID("0b5c7a8e-1111-2222-3333-444455556666"), cache.GetErrors())
	}
	for name, tc := range map[string]struct {
		uid string
		e   Edits
	}{"no uid": {uid: "", e: e}, "no devices": {uid: "u", e: Unallocated()}} {
		if _, err := ClaimSpec(tc.uid, tc.e); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

package inject

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	"tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"
	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/hyperaccel/lpu-node/pkg/device"
)

// inventory returns n devices; rings splits them into rings of perRing,
// each rotated by rot so that ring order differs from index order.
func inventory(n, perRing, rot int) *device.Inventory {
	inv := &device.Inventory{DriverVersion: "2.1.0"}
	for i := range n {
		inv.Devices = append(inv.Devices, dev(i))
	}
	for start := 0; start < n; start += perRing {
		var ring []string
		for j := range perRing {
			ring = append(ring, device.ID(start+(j+rot)%perRing))
		}
		inv.Rings = append(inv.Rings, ring)
	}
	return inv
}

var testOpts = Options{Mounts: []Mount{{HostPath: "/usr/lib/lpu"}}, Env: map[string]string{"LPU_LOG": "info"}}

func TestSpecShape(t *testing.T) {
	s, err := Spec(inventory(8, 4, 1), testOpts)
	if err != nil {
		t.Fatal(err)
	}
	if s.Kind != CDIKind || len(s.Devices) != 9 {
		t.Fatalf("kind %q, %d devices", s.Kind, len(s.Devices))
	}
	for i, d := range s.Devices[:8] {
		if d.Name != device.ID(i) || len(d.ContainerEdits.DeviceNodes) != 1 || d.ContainerEdits.DeviceNodes[0].Path != "/dev/"+device.ID(i) {
			t.Errorf("device %d = %+v", i, d)
		}
		if len(d.ContainerEdits.Env) != 0 {
			t.Errorf("device %s sets env %q; LPU_VISIBLE_DEVICES comes from the device plugin", d.Name, d.ContainerEdits.Env)
		}
	}
	all := s.Devices[8]
	var paths []string
	for _, n := range all.ContainerEdits.DeviceNodes {
		paths = append(paths, n.Path)
	}
	want := []string{"/dev/lpu1", "/dev/lpu2", "/dev/lpu3", "/dev/lpu0", "/dev/lpu5", "/dev/lpu6", "/dev/lpu7", "/dev/lpu4"}
	if all.Name != "all" || !slices.Equal(paths, want) {
		t.Errorf("all = %q %q, want ring order %q", all.Name, paths, want)
	}
	if len(all.ContainerEdits.Env) != 0 {
		t.Errorf("all sets env %q", all.ContainerEdits.Env)
	}
	if !slices.Equal(s.ContainerEdits.Env, []string{"LPU_DRIVER_VERSION=2.1.0", "LPU_LOG=info"}) {
		t.Errorf("common env = %q", s.ContainerEdits.Env)
	}
	if len(s.ContainerEdits.Mounts) != 1 || s.ContainerEdits.Mounts[0].ContainerPath != "/usr/lib/lpu" {
		t.Errorf("common mounts = %v", s.ContainerEdits.Mounts)
	}
}

// TestSpecVersion: the spec declares the lowest version the CDI library
// says it needs, and that is old enough for podman 4.3 (≤ 0.5.0).
func TestSpecVersion(t *testing.T) {
	tests := map[string]Options{
		"with mounts":    testOpts,
		"without mounts": {},
	}
	for name, opts := range tests {
		t.Run(name, func(t *testing.T) {
			s, err := Spec(inventory(8, 8, 0), opts)
			if err != nil {
				t.Fatal(err)
			}
			min, err := specs.MinimumRequiredVersion(s)
			if err != nil {
				t.Fatal(err)
			}
			if s.Version != min {
				t.Errorf("cdiVersion %q, library minimum %q", s.Version, min)
			}
			if err := specs.ValidateVersion(s); err != nil {
				t.Errorf("ValidateVersion: %v", err)
			}
			if versionAbove(s.Version, "0.5.0") {
				t.Errorf("cdiVersion %q is newer than podman 4.3 accepts (0.5.0)", s.Version)
			}
		})
	}
}

func versionAbove(v, max string) bool {
	a, b := strings.Split(v, "."), strings.Split(max, ".")
	for i := range 3 {
		if len(a[i]) != len(b[i]) {
			return len(a[i]) > len(b[i])
		}
		if a[i] != b[i] {
			return a[i] > b[i]
		}
	}
	return false
}

func TestSpecNoDevices(t *testing.T) {
	for name, inv := range map[string]*device.Inventory{"nil": nil, "empty": {}} {
		if _, err := Spec(inv, testOpts); !errors.Is(err, ErrNoDevices) {
			t.Errorf("%s: err = %v, want ErrNoDevices", name, err)
		}
	}
}

// loadSpec renders inv as a CDI spec, writes it to a fresh directory with
// WriteSpec and loads that directory in a real CDI cache.
func loadSpec(t *testing.T, inv *device.Inventory, opts Options) *cdi.Cache {
	t.Helper()
	dir := t.TempDir()
	s, err := Spec(inv, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := WriteSpec(dir, s); err != nil {
		t.Fatal(err)
	}
	cache, err := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	return cache
}

// TestSpecInRealCache: the written spec loads in a real CDI cache without
// errors, its devices resolve by CDIDeviceNames, and injecting them into an
// OCI spec gives the device nodes, cgroup rules, mounts and env.
// TestSpecSkipsLPUWithoutNodes: an unhealthy LPU whose nodes could not be
// found (an Orion card without a render node and no management node) has
// no CDI device (CDI rejects a device without edits); the others stay.
func TestSpecSkipsLPUWithoutNodes(t *testing.T) {
	inv := inventory(3, 3, 0)
	inv.Devices[1].Path, inv.Devices[1].Major, inv.Devices[1].Minor = "", 0, 0
	inv.Devices[1].Health = device.Health{Reason: "render node missing"}
	s, err := Spec(inv, testOpts)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range s.Devices {
		names = append(names, d.Name)
	}
	if !slices.Equal(names, []string{"lpu0", "lpu2", CDIAllDevice}) {
		t.Fatalf("devices %v", names)
	}
	if n := len(s.Devices[2].ContainerEdits.DeviceNodes); n != 2 {
		t.Fatalf("all has %d nodes, want 2", n)
	}
	if _, err := WriteSpec(t.TempDir(), s); err != nil {
		t.Fatalf("the CDI library refuses the spec: %v", err)
	}
}

func TestSpecInRealCache(t *testing.T) {
	cache := loadSpec(t, inventory(8, 8, 0), testOpts)
	if errs := cache.GetErrors(); len(errs) != 0 {
		t.Fatalf("cache errors: %v", errs)
	}
	names := cache.ListDevices()
	wantNames := append(CDIDeviceNames([]string{"lpu0", "lpu1", "lpu2", "lpu3", "lpu4", "lpu5", "lpu6", "lpu7"}), "hyperaccel.ai/lpu=all")
	slices.Sort(wantNames)
	if !slices.Equal(names, wantNames) {
		t.Errorf("ListDevices = %q, want %q", names, wantNames)
	}

	ids := []string{"lpu7", "lpu0", "lpu1"}
	spec := &oci.Spec{Process: &oci.Process{Env: []string{"PATH=/bin"}}, Linux: &oci.Linux{}}
	if unresolved, err := cache.InjectDevices(spec, CDIDeviceNames(ids)...); err != nil {
		t.Fatalf("InjectDevices: %v (unresolved %q)", err, unresolved)
	}
	var paths []string
	for _, d := range spec.Linux.Devices {
		paths = append(paths, d.Path)
		if d.Type != "c" || d.Major != 240 || d.FileMode == nil || *d.FileMode != 0o666 {
			t.Errorf("device %+v", d)
		}
	}
	if !slices.Equal(paths, []string{"/dev/lpu7", "/dev/lpu0", "/dev/lpu1"}) {
		t.Errorf("injected devices %q", paths)
	}
	if spec.Linux.Resources == nil || len(spec.Linux.Resources.Devices) != 3 {
		t.Fatalf("cgroup rules %+v", spec.Linux.Resources)
	}
	for i, r := range spec.Linux.Resources.Devices {
		if !r.Allow || r.Type != "c" || *r.Major != 240 || *r.Minor != int64([]int{7, 0, 1}[i]) || r.Access != "rwm" {
			t.Errorf("cgroup rule %d = %+v", i, r)
		}
	}
	if len(spec.Mounts) != 1 || spec.Mounts[0].Source != "/usr/lib/lpu" || spec.Mounts[0].Type != "bind" || !slices.Contains(spec.Mounts[0].Options, "ro") {
		t.Errorf("mounts = %+v", spec.Mounts)
	}
	if !slices.Equal(spec.Process.Env, []string{"PATH=/bin", "LPU_DRIVER_VERSION=2.1.0", "LPU_LOG=info"}) {
		t.Errorf("env = %q", spec.Process.Env)
	}
}

func TestWriteSpecUnchanged(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cdi") // created by WriteSpec
	s, err := Spec(inventory(8, 8, 0), testOpts)
	if err != nil {
		t.Fatal(err)
	}
	changed, err := WriteSpec(dir, s)
	if err != nil || !changed {
		t.Fatalf("first write: changed=%v err=%v", changed, err)
	}
	path := filepath.Join(dir, SpecFileName)
	past := time.Now().Add(-time.Hour)
	if err := os.Chtimes(path, past, past); err != nil { // any rewrite would move mtime
		t.Fatal(err)
	}
	old := stat(t, path)

	again, _ := Spec(inventory(8, 8, 0), testOpts) // equal content, new value
	changed, err = WriteSpec(dir, again)
	if err != nil || changed {
		t.Fatalf("same spec: changed=%v err=%v", changed, err)
	}
	if now := stat(t, path); now.Ino != old.Ino || now.Mtim != old.Mtim {
		t.Errorf("same spec rewrote the file: inode %d->%d mtime %v->%v", old.Ino, now.Ino, old.Mtim, now.Mtim)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("spec dir holds %d entries", len(entries))
	}

	other, _ := Spec(inventory(4, 4, 0), testOpts)
	changed, err = WriteSpec(dir, other)
	if err != nil || !changed {
		t.Fatalf("new spec: changed=%v err=%v", changed, err)
	}
	if now := stat(t, path); now.Ino == old.Ino {
		t.Error("changed spec was not replaced atomically (same inode)")
	}
	got, err := cdi.ReadSpec(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Devices) != 5 {
		t.Errorf("rewritten spec has %d devices, want 5", len(got.Devices))
	}

	if err := RemoveSpec(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("spec still there: %v", err)
	}
	if err := RemoveSpec(dir); err != nil {
		t.Errorf("second RemoveSpec: %v", err)
	}
}

func TestWriteSpecRejectsInvalid(t *testing.T) {
	dir := t.TempDir()
	s, _ := Spec(inventory(2, 2, 0), testOpts)
	s.Kind = "not a kind"
	if _, err := WriteSpec(dir, s); err == nil || !strings.Contains(err.Error(), SpecFileName) {
		t.Errorf("invalid spec: err = %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("invalid spec left %d files", len(entries))
	}
	if _, err := WriteSpec(dir, nil); err == nil {
		t.Error("nil spec accepted")
	}
}

func TestWriteSpecReplacesCorrupt(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, SpecFileName)
	if err := os.WriteFile(path, []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, _ := Spec(inventory(2, 2, 0), testOpts)
	changed, err := WriteSpec(dir, s)
	if err != nil || !changed {
		t.Fatalf("changed=%v err=%v", changed, err)
	}
	if _, err := cdi.ReadSpec(path, 0); err != nil {
		t.Errorf("spec unreadable after rewrite: %v", err)
	}
}

func stat(t *testing.T, path string) *syscall.Stat_t {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t)
}

func TestCDIDeviceNames(t *testing.T) {
	got := CDIDeviceNames([]string{"lpu3", "lpu0"})
	if !slices.Equal(got, []string{"hyperaccel.ai/lpu=lpu3", "hyperaccel.ai/lpu=lpu0"}) {
		t.Errorf("CDIDeviceNames = %q", got)
	}
	for _, n := range got {
		if _, _, _, err := parser.ParseQualifiedName(n); err != nil {
			t.Errorf("%q: %v", n, err)
		}
	}
}

// TestWriteSpecInvalidKeepsOld: the CDI library refuses an invalid spec
// on the temp file, so the spec in place stays as it was and no temp file
// is left; a valid one is durable with the library's mode (0600).
func TestWriteSpecInvalidKeepsOld(t *testing.T) {
	dir := t.TempDir()
	good, _ := Spec(inventory(2, 2, 0), testOpts)
	if _, err := WriteSpec(dir, good); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, SpecFileName)
	before, _ := os.ReadFile(path)
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("spec mode %#o, want 0600", fi.Mode().Perm())
	}
	bad, _ := Spec(inventory(4, 4, 0), testOpts)
	bad.Devices[0].Name = "not/a/name"
	if _, err := WriteSpec(dir, bad); err == nil || !strings.Contains(err.Error(), SpecFileName) {
		t.Fatalf("invalid spec: err = %v", err)
	}
	if after, _ := os.ReadFile(path); string(after) != string(before) {
		t.Error("an invalid spec replaced the valid one")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("dir holds %d entries, want only the spec", len(entries))
	}
}

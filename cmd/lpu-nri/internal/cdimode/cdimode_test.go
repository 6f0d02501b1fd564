package cdimode

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"tags.cncf.io/container-device-interface/pkg/cdi"
	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/device/devicetest"
	"github.com/hyperaccel/lpu-node/pkg/inject"
)

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

func tree(t *testing.T, n int) string {
	rows := make([]devicetest.Row, n)
	for i := range rows {
		rows[i] = devicetest.Row{Index: i}
	}
	return devicetest.NewTree(t, rows...)
}

func syncer(root, dir string) *Syncer {
	return &Syncer{Discoverer: device.NewSysfs(root, device.WithLogger(discard)), Dir: dir, Log: discard,
		Options: inject.Options{Mounts: []inject.Mount{{HostPath: "/usr/lib/lpu"}}}}
}

func TestSyncLoadsInRealCache(t *testing.T) {
	root, dir := tree(t, 8), t.TempDir()
	s := syncer(root, dir)
	changed, err := s.Sync(context.Background())
	if err != nil || !changed {
		t.Fatalf("first Sync = %v, %v; want changed", changed, err)
	}
	cache, err := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	if errs := cache.GetErrors(); len(errs) != 0 {
		t.Fatalf("cdi cache errors: %v", errs)
	}
	want := []string{}
	for i := range 8 {
		want = append(want, inject.CDIKind+"="+device.ID(i))
	}
	want = append(want, inject.CDIKind+"=all")
	got := cache.ListDevices()
	if !slices.Equal(slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(want))) {
		t.Fatalf("cache devices %v, want %v", got, want)
	}
	specsOfKind := cache.GetVendorSpecs("hyperaccel.ai")
	if len(specsOfKind) != 1 {
		t.Fatalf("%d specs for vendor, want 1", len(specsOfKind))
	}
	raw := specsOfKind[0].Spec
	minV, err := specs.MinimumRequiredVersion(raw)
	if err != nil {
		t.Fatal(err)
	}
	if raw.Version != minV {
		t.Fatalf("cdiVersion %s, minimum required %s", raw.Version, minV)
	}
	if err := specs.ValidateVersion(raw); err != nil {
		t.Fatal(err)
	}
	// Podman 4.3 reads at most 0.5.0.
	if v := raw.Version; v > "0.5.0" {
		t.Fatalf("cdiVersion %s is newer than 0.5.0", v)
	}
	// Injecting lpu3 into an OCI spec through the library gives its node.
	dev := cache.GetDevice(inject.CDIKind + "=lpu3")
	if dev == nil {
		t.Fatal("lpu3 not resolvable")
	}
	if n := dev.ContainerEdits.DeviceNodes; len(n) != 1 || n[0].Path != "/dev/lpu3" || n[0].Major != device.DefaultMajor || n[0].Minor != 3 {
		t.Fatalf("lpu3 nodes %+v", n)
	}
}

func TestSyncRewritesOnlyOnChange(t *testing.T) {
	root, dir := tree(t, 4), t.TempDir()
	s := syncer(root, dir)
	ctx := context.Background()
	if _, err := s.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, inject.SpecFileName)
	before, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	for range 3 {
		changed, err := s.Sync(ctx)
		if err != nil || changed {
			t.Fatalf("Sync of an unchanged inventory = %v, %v; want no change", changed, err)
		}
	}
	after, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if !after.ModTime().Equal(before.ModTime()) || !os.SameFile(before, after) {
		t.Fatal("unchanged inventory rewrote the spec file")
	}

	steps := map[string]func(){
		"device added":           func() { devicetest.AddDevice(t, root, devicetest.Row{Index: 4}) },
		"driver version changed": func() { devicetest.WriteFile(t, root, device.ModuleVersion, "9.9.9\n") },
	}
	for _, name := range []string{"device added", "driver version changed"} {
		steps[name]()
		changed, err := s.Sync(ctx)
		if err != nil || !changed {
			t.Fatalf("%s: Sync = %v, %v; want changed", name, changed, err)
		}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"lpu4"`, "9.9.9"} {
		if !bytes.Contains(data, []byte(want)) {
			t.Fatalf("spec lacks %s:\n%s", want, data)
		}
	}
}

func TestSyncRemovesStaleSpecsOfOurKind(t *testing.T) {
	root, dir := tree(t, 2), t.TempDir()
	files := map[string]string{
		"lpu.json":            `{"cdiVersion":"0.3.0","kind":"hyperaccel.ai/lpu","devices":[]}`,
		"hyperaccel-old.yaml": "cdiVersion: 0.3.0\nkind: hyperaccel.ai/lpu\ndevices: []\n",
		"vendor.com-gpu.json": `{"cdiVersion":"0.3.0","kind":"vendor.com/gpu","devices":[]}`,
		"notes.txt":           "kind: hyperaccel.ai/lpu",
		"broken.json":         "{not json",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := syncer(root, dir).Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	var left []string
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		left = append(left, e.Name())
	}
	want := []string{"broken.json", inject.SpecFileName, "notes.txt", "vendor.com-gpu.json"}
	if !slices.Equal(left, want) {
		t.Fatalf("files after Sync %v, want %v", left, want)
	}
}

func TestSyncNoDevicesRemovesSpec(t *testing.T) {
	root, dir := tree(t, 2), t.TempDir()
	s := syncer(root, dir)
	if _, err := s.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := s.Ready(); err != nil {
		t.Fatalf("Ready() with a current spec = %v", err)
	}
	for _, id := range []string{"lpu0", "lpu1"} {
		if err := os.RemoveAll(filepath.Join(root, device.ClassDir, id)); err != nil {
			t.Fatal(err)
		}
	}
	changed, err := s.Sync(context.Background())
	if !errors.Is(err, inject.ErrNoDevices) || !changed {
		t.Fatalf("Sync without devices = %v, %v; want ErrNoDevices and changed", changed, err)
	}
	if _, err := os.Stat(filepath.Join(dir, inject.SpecFileName)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("spec still present: %v", err)
	}
	if err := s.Ready(); !errors.Is(err, errNotSynced) {
		t.Fatalf("Ready() without a spec = %v, want errNotSynced", err)
	}
}

func TestNames(t *testing.T) {
	spec, err := Render(context.Background(), device.NewSysfs(tree(t, 3), device.WithLogger(discard)), inject.Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"hyperaccel.ai/lpu=lpu0", "hyperaccel.ai/lpu=lpu1", "hyperaccel.ai/lpu=lpu2", "hyperaccel.ai/lpu=all"}
	if got := Names(spec); !slices.Equal(got, want) {
		t.Fatalf("Names = %v, want %v", got, want)
	}
}

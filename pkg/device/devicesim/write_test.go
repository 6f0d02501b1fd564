package devicesim_test

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/device/devicesim"
	"github.com/hyperaccel/lpu-node/pkg/device/devicetest"
)

// simInventory is what discovery must find on a fresh simulated node.
func simInventory(devices, rings int) *device.Inventory {
	inv := &device.Inventory{DriverVersion: "2.1.0-sim", Backend: device.BackendLPU}
	per := devices / rings
	for i := 0; i < devices; i++ {
		numa := 0
		if i >= devices/2 && devices > 1 {
			numa = 1
		}
		inv.Devices = append(inv.Devices, device.Device{
			ID: device.ID(i), Index: i, Path: fmt.Sprintf("/dev/lpu%d", i),
			Major: device.DefaultMajor, Minor: int64(i),
			Serial: fmt.Sprintf("LPUSIM%06d", i), Firmware: "1.8.2-sim", Model: devicesim.Model,
			NUMANode: numa, PCIBusID: fmt.Sprintf("0000:%02x:00.0", 0x10+i),
			Health:       device.Health{Healthy: true},
			Nodes:        []device.Node{{Path: fmt.Sprintf("/dev/lpu%d", i), Major: device.DefaultMajor, Minor: int64(i)}},
			PCIFunctions: []string{fmt.Sprintf("0000:%02x:00.0", 0x10+i)},
		})
		if i%per == 0 {
			inv.Rings = append(inv.Rings, nil)
		}
		inv.Rings[i/per] = append(inv.Rings[i/per], device.ID(i))
	}
	return inv
}

func TestWriteRoundTrip(t *testing.T) {
	tests := map[string]struct{ devices, rings int }{
		"8 in one ring":        {8, 1},
		"16 in two rings":      {16, 2},
		"4 rings of two":       {8, 4},
		"rings of one":         {3, 3},
		"one device":           {1, 1},
		"32 in four rings":     {32, 4},
		"odd ring size of 3x5": {15, 5},
	}
	sources := map[string][]device.Option{
		"auto":  nil,
		"table": {device.WithTopologySource(device.TopologyTable), device.WithNetworkTable(device.DefaultNetworkTable)},
		"sysfs": {device.WithTopologySource(device.TopologySysfs)},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			if err := devicesim.Write(root, devicesim.Spec{Devices: tc.devices, Rings: tc.rings}); err != nil {
				t.Fatal(err)
			}
			want := simInventory(tc.devices, tc.rings)
			for src, opts := range sources {
				got := discover(t, root, opts...)
				if !reflect.DeepEqual(got, want) {
					t.Errorf("source %s:\n got %+v\nwant %+v", src, got, want)
				}
			}
		})
	}
}

func TestWriteFiles(t *testing.T) {
	root := t.TempDir()
	if err := devicesim.Write(root, devicesim.Spec{Devices: 4, Rings: 1, Major: 240, DriverVersion: "9.9", Firmware: "fw7", Model: "X200 rev B"}); err != nil {
		t.Fatal(err)
	}
	inv := discover(t, root)
	if d := inv.Devices[3]; d.Major != 240 || d.Minor != 3 || d.Firmware != "fw7" || d.Model != "X200 rev B" || inv.DriverVersion != "9.9" {
		t.Errorf("spec not applied: %+v, driver %q", d, inv.DriverVersion)
	}
	for path, mode := range map[string]fs.FileMode{
		devicesim.Library: 0o644, devicesim.Tool: 0o755, "/dev/lpu3": 0o666, device.DefaultNetworkTable: 0o644,
	} {
		fi, err := os.Stat(filepath.Join(root, path))
		if err != nil {
			t.Fatal(err)
		}
		if !fi.Mode().IsRegular() || fi.Mode().Perm() != mode {
			t.Errorf("%s: mode %v, want regular %v", path, fi.Mode(), mode)
		}
	}
	// Class entries are relative links into /sys/devices, as on a real host,
	// so the tree can be moved.
	target, err := os.Readlink(filepath.Join(root, "sys/class/lpu/lpu2"))
	if err != nil || target != "../../devices/pci0000:00/0000:12:00.0/lpu/lpu2" {
		t.Errorf("class link = %q, %v", target, err)
	}
	table, err := os.ReadFile(filepath.Join(root, device.DefaultNetworkTable))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(table), "lpu3 lpu0\n") {
		t.Errorf("network table does not close the ring:\n%s", table)
	}
	moved := filepath.Join(t.TempDir(), "moved")
	if err := os.Rename(root, moved); err != nil {
		t.Fatal(err)
	}
	if got := discover(t, moved); !reflect.DeepEqual(got, inv) { // moved: the marker moves with the tree
		t.Errorf("moved tree discovers differently")
	}
}

// snapshot records every path under root with its mode, content or link
// target, and inode (to see rewrites).
func snapshot(t *testing.T, root string) map[string]string {
	t.Helper()
	snap := map[string]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(path)
		if err != nil {
			return err
		}
		v := fi.Mode().String()
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(path)
			if err != nil {
				return err
			}
			v += " -> " + target
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			v += " " + string(b)
		}
		v += fmt.Sprintf(" ino=%d", fi.Sys().(*syscall.Stat_t).Ino)
		snap[strings.TrimPrefix(path, root)] = v
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

func TestWriteIdempotent(t *testing.T) {
	root := t.TempDir()
	spec := devicesim.Spec{Devices: 8, Rings: 2}
	if err := devicesim.Write(root, spec); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, root)
	if err := devicesim.Write(root, spec); err != nil {
		t.Fatal(err)
	}
	after := snapshot(t, root)
	if !reflect.DeepEqual(before, after) {
		for p, v := range after {
			if before[p] != v {
				t.Errorf("%s changed:\n%q\n%q", p, before[p], v)
			}
		}
		for p := range before {
			if _, ok := after[p]; !ok {
				t.Errorf("%s removed", p)
			}
		}
	}
}

func TestWriteRepairsAndPreserves(t *testing.T) {
	root := t.TempDir()
	spec := devicesim.Spec{Devices: 8, Rings: 1}
	if err := devicesim.Write(root, spec); err != nil {
		t.Fatal(err)
	}
	devicetest.SetStatus(t, root, "lpu3", "ECC_ERROR")
	devicetest.WriteAttr(t, root, "lpu3", device.AttrUtilization, "55\n")
	devicetest.WriteAttr(t, root, "lpu5", "dev", "garbage\n")
	devicetest.RemoveNode(t, root, "lpu6")
	if err := os.Remove(filepath.Join(root, devicesim.Tool)); err != nil {
		t.Fatal(err)
	}

	if err := devicesim.Write(root, spec); err != nil {
		t.Fatal(err)
	}
	s := device.NewSysfs(root)
	if h := s.ProbeHealth("lpu3"); h.Healthy || h.Reason != `status "ECC_ERROR"` {
		t.Errorf("flipped status not preserved: %+v", h)
	}
	if tm, err := s.Telemetry("lpu3"); err != nil || tm.UtilizationPercent != 55 {
		t.Errorf("telemetry not preserved: %+v %v", tm, err)
	}
	for _, id := range []string{"lpu5", "lpu6"} {
		if h := s.ProbeHealth(id); !h.Healthy {
			t.Errorf("%s not repaired: %+v", id, h)
		}
	}
	if _, err := os.Stat(filepath.Join(root, devicesim.Tool)); err != nil {
		t.Errorf("tool not restored: %v", err)
	}
}

func TestWriteShrinks(t *testing.T) {
	root := t.TempDir()
	if err := devicesim.Write(root, devicesim.Spec{Devices: 16, Rings: 2}); err != nil {
		t.Fatal(err)
	}
	if err := devicesim.Write(root, devicesim.Spec{Devices: 8, Rings: 1}); err != nil {
		t.Fatal(err)
	}
	for src, opts := range map[string][]device.Option{
		"auto":  nil,
		"table": {device.WithNetworkTable(device.DefaultNetworkTable)},
	} {
		if got, want := discover(t, root, opts...), simInventory(8, 1); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: after shrinking:\n got %+v\nwant %+v", src, got, want)
		}
	}
	if _, err := os.Lstat(filepath.Join(root, "dev/lpu8")); !os.IsNotExist(err) {
		t.Errorf("/dev/lpu8 still there: %v", err)
	}
}

// Two daemons start at once on the same state dir.
func TestWriteConcurrent(t *testing.T) {
	root := t.TempDir()
	spec := devicesim.Spec{Devices: 16, Rings: 2}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() { errs <- devicesim.Write(root, spec) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := discover(t, root); !reflect.DeepEqual(got, simInventory(16, 2)) {
		t.Errorf("concurrent simulate: %+v", got)
	}
	_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(path, ".tmp") {
			t.Errorf("temporary file left: %s", path)
		}
		return err
	})
}

func TestSpecErrors(t *testing.T) {
	tests := map[string]struct {
		spec    devicesim.Spec
		wantErr string
	}{
		"no devices":        {devicesim.Spec{Rings: 1}, "simulate: devices 0: want 1 to 1024"},
		"too many devices":  {devicesim.Spec{Devices: 1025, Rings: 1}, "simulate: devices 1025: want 1 to 1024"},
		"no rings":          {devicesim.Spec{Devices: 8}, "simulate: rings 0: want 1 to 8"},
		"more rings":        {devicesim.Spec{Devices: 2, Rings: 4}, "simulate: rings 4: want 1 to 2"},
		"uneven rings":      {devicesim.Spec{Devices: 8, Rings: 3}, "simulate: rings 3 does not divide devices 8"},
		"negative major":    {devicesim.Spec{Devices: 8, Rings: 1, Major: -1}, "simulate: major -1: want 1 to 4095"},
		"major too large":   {devicesim.Spec{Devices: 8, Rings: 1, Major: 4096}, "simulate: major 4096: want 1 to 4095"},
		"spaces in version": {devicesim.Spec{Devices: 8, Rings: 1, DriverVersion: "1 2"}, `simulate: driver version "1 2"`},
		"newline firmware":  {devicesim.Spec{Devices: 8, Rings: 1, Firmware: "1\n"}, `simulate: firmware "1\n"`},
		"control in model":  {devicesim.Spec{Devices: 8, Rings: 1, Model: "X\x00"}, `simulate: model "X\x00"`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			err := devicesim.Write(root, tc.spec)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want containing %q", err, tc.wantErr)
			}
			if entries, _ := os.ReadDir(root); len(entries) != 0 {
				t.Errorf("invalid spec wrote %d entries", len(entries))
			}
		})
	}
}

func TestWriteUnwritableRoot(t *testing.T) {
	root := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(root, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	err := devicesim.Write(root, devicesim.Spec{Devices: 1, Rings: 1})
	if err == nil || !strings.Contains(err.Error(), "simulate under "+root) {
		t.Fatalf("err = %v", err)
	}
}

func BenchmarkSimulateRerun16(b *testing.B) {
	root := b.TempDir()
	spec := devicesim.Spec{Devices: 16, Rings: 2}
	if err := devicesim.Write(root, spec); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := devicesim.Write(root, spec); err != nil {
			b.Fatal(err)
		}
	}
}

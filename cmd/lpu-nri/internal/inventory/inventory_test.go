package inventory

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/device/devicesim"
	"github.com/hyperaccel/lpu-node/pkg/device/devicetest"
)

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

func TestRefresh(t *testing.T) {
	root := devicetest.NewTree(t, devicetest.Row{Index: 0}, devicetest.Row{Index: 1, Status: "ECC_ERROR"})
	s := New(device.NewSysfs(root, device.WithLogger(discard)), Options{Logger: discard})
	if s.Load().Ready() {
		t.Fatal("ready before the first scan")
	}
	changes := s.Changes()
	snap, err := s.Refresh(context.Background())
	if err != nil || !snap.Ready() || s.Load() != snap {
		t.Fatalf("Refresh = %v, %v", snap, err)
	}
	select {
	case <-changes:
	default:
		t.Fatal("no change notification for the first inventory")
	}
	if d, ok := snap.Device("lpu1"); !ok || d.Health.Healthy {
		t.Fatalf("lpu1 = %+v, %v; want known and unhealthy", d, ok)
	}
	if _, ok := snap.Device("lpu2"); ok {
		t.Fatal("lpu2 known")
	}
	if snap.DriverVersion() != devicetest.DriverVersion {
		t.Fatalf("driver version %q", snap.DriverVersion())
	}

	// An unchanged node does not notify.
	if _, err := s.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changes:
		t.Fatal("change notification for an unchanged node")
	default:
	}

	// A broken topology input keeps the last good inventory, with Err set.
	devicetest.WriteFile(t, root, device.DefaultNetworkTable, "lpu0 lpu9\n")
	s2 := New(device.NewSysfs(root, device.WithTopologySource(device.TopologyTable), device.WithLogger(discard)), Options{Logger: discard})
	s2.cur.Store(snap)
	bad, err := s2.Refresh(context.Background())
	if err == nil || bad.Err == nil || bad.Inventory != snap.Inventory {
		t.Fatalf("Refresh with a bad table = %+v, %v; want the old inventory and an error", bad, err)
	}

	// The driver goes away: nothing can be injected any more.
	if err := os.RemoveAll(filepath.Join(root, "sys")); err != nil {
		t.Fatal(err)
	}
	gone, err := s.Refresh(context.Background())
	if !errors.Is(err, device.ErrNoDriver) || !gone.Ready() || len(gone.Inventory.Devices) != 0 {
		t.Fatalf("Refresh without driver = %+v, %v; want an empty inventory", gone, err)
	}
	if _, ok := gone.Device("lpu0"); ok {
		t.Fatal("lpu0 still known without a driver")
	}
}

func TestIsLPUNode(t *testing.T) {
	root := devicetest.NewTree(t, devicetest.Row{Index: 0})
	s := New(device.NewSysfs(root, device.WithLogger(discard)), Options{Logger: discard})
	snap, err := s.Refresh(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		path, typ string
		major     int64
		want      bool
	}{
		"our major":           {"/dev/accel0", "c", device.DefaultMajor, true},
		"our path":            {"/dev/lpu12", "c", 1, true},
		"block with major":    {"/dev/sda", "b", device.DefaultMajor, false},
		"other device":        {"/dev/fuse", "c", 10, false},
		"path-like lookalike": {"/dev/lpu01", "c", 10, false},
		"unbuffered char":     {"/dev/accel0", "u", device.DefaultMajor, true},
		"untyped":             {"/dev/accel0", "", device.DefaultMajor, true},
		"pipe with major":     {"/dev/accel0", "p", device.DefaultMajor, false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := snap.IsLPUNode(tc.path, tc.typ, tc.major, 0); got != tc.want {
				t.Fatalf("IsLPUNode(%s %s %d) = %v", tc.path, tc.typ, tc.major, got)
			}
		})
	}
}

// TestIsLPUNodeOrion: on the xilinx backend a node is an LPU's by its
// exact number, render or management node alike; the render major is
// DRM's, so another render node (a GPU's) is not an LPU's.
func TestIsLPUNodeOrion(t *testing.T) {
	root := t.TempDir()
	if err := devicesim.Write(root, devicesim.Spec{Devices: 2, Rings: 1, Backend: device.BackendXilinx}); err != nil {
		t.Fatal(err)
	}
	disc := device.NewSysfs(root, device.WithLogger(discard), device.WithDiscovery(device.Discovery{Backend: device.BackendXilinx}))
	snap, err := New(disc, Options{Logger: discard}).Refresh(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		path         string
		major, minor int64
		want         bool
	}{
		"render node of lpu1":     {"/dev/dri/renderD129", devicesim.RenderMajor, 129, true},
		"management node of lpu0": {"/dev/xclmgmt5888", devicesim.XclmgmtMajor, 0, true},
		"renamed management node": {"/dev/accel", devicesim.XclmgmtMajor, 1, true},
		"a GPU's render node":     {"/dev/dri/renderD140", devicesim.RenderMajor, 140, false},
		"another xclmgmt minor":   {"/dev/xclmgmt9", devicesim.XclmgmtMajor, 9, false},
		"lpu path of no LPU":      {"/dev/lpu3", 1, 3, true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := snap.IsLPUNode(tc.path, "c", tc.major, tc.minor); got != tc.want {
				t.Fatalf("IsLPUNode(%s %d:%d) = %v, want %v", tc.path, tc.major, tc.minor, got, tc.want)
			}
		})
	}
}

func TestRunRescansOnKick(t *testing.T) {
	root := devicetest.NewTree(t, devicetest.Row{Index: 0})
	s := New(device.NewSysfs(root, device.WithLogger(discard)), Options{Logger: discard, Interval: time.Hour})
	if _, err := s.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	devicetest.AddDevice(t, root, devicetest.Row{Index: 1})
	deadline := time.Now().Add(5 * time.Second)
	for {
		s.Kick()
		if _, ok := s.Load().Device("lpu1"); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Kick did not rescan")
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

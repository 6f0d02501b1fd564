package device_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/device/devicetest"
)

var quiet = slog.New(slog.DiscardHandler)

func discover(t *testing.T, root string, opts ...device.Option) *device.Inventory {
	t.Helper()
	opts = append([]device.Option{device.WithLogger(quiet)}, opts...)
	inv, err := device.NewSysfs(root, opts...).Discover(context.Background())
	if err != nil {
		t.Fatalf("Discover: %v", err)
	}
	return inv
}

func TestDiscoverOneDevice(t *testing.T) {
	healthy := func(idx int) device.Device {
		return device.Device{
			ID: device.ID(idx), Index: idx, Path: "/dev/" + device.ID(idx),
			Major: device.DefaultMajor, Minor: int64(idx),
			Serial: devicetest.Serial(idx), Firmware: devicetest.Firmware, Model: devicetest.Model,
			NUMANode: -1, Health: device.Health{Healthy: true},
		}
	}
	with := func(d device.Device, f func(*device.Device)) device.Device { f(&d); return d }
	unhealthy := func(reason string) func(*device.Device) {
		return func(d *device.Device) { d.Health = device.Health{Reason: reason} }
	}
	tests := map[string]struct {
		row   devicetest.Row
		setup func(t *testing.T, root string)
		want  device.Device
	}{
		"ready": {
			row:  devicetest.Row{Index: 0},
			want: healthy(0),
		},
		"busy is usable": {
			row:  devicetest.Row{Index: 3, Status: "BUSY"},
			want: healthy(3),
		},
		"status padded with whitespace": {
			row:  devicetest.Row{Index: 1, Files: map[string]string{"status": "  READY \n\n"}},
			want: healthy(1),
		},
		"error word": {
			row:  devicetest.Row{Index: 2, Status: "ECC_ERROR"},
			want: with(healthy(2), unhealthy(`status "ECC_ERROR"`)),
		},
		"lower-case ready is not a status word": {
			row:  devicetest.Row{Index: 2, Status: "ready"},
			want: with(healthy(2), unhealthy(`status "ready"`)),
		},
		"empty status": {
			row:  devicetest.Row{Index: 2, Files: map[string]string{"status": "\n"}},
			want: with(healthy(2), unhealthy(`status ""`)),
		},
		"missing status file": {
			row:  devicetest.Row{Index: 4, Omit: []string{"status"}},
			want: with(healthy(4), unhealthy("status file /sys/class/lpu/lpu4/status missing")),
		},
		"unreadable status (a directory)": {
			row: devicetest.Row{Index: 4, Omit: []string{"status"}},
			setup: func(t *testing.T, root string) {
				if err := os.Mkdir(filepath.Join(root, "sys/class/lpu/lpu4/status"), 0o755); err != nil {
					t.Fatal(err)
				}
			},
			want: with(healthy(4), unhealthy("status file read /sys/class/lpu/lpu4/status: not a regular file: is a directory")),
		},
		"status is a fifo: refused, not blocking": {
			row: devicetest.Row{Index: 4, Omit: []string{"status"}},
			setup: func(t *testing.T, root string) {
				if err := syscall.Mkfifo(filepath.Join(root, "sys/class/lpu/lpu4/status"), 0o644); err != nil {
					t.Fatal(err)
				}
			},
			want: with(healthy(4), unhealthy("status file read /sys/class/lpu/lpu4/status: not a regular file: is a named pipe")),
		},
		"oversized status is not read": {
			row:  devicetest.Row{Index: 0, Files: map[string]string{"status": "READY" + strings.Repeat(" ", 5000)}},
			want: with(healthy(0), unhealthy("status file read /sys/class/lpu/lpu0/status: file too large: more than 4096 bytes")),
		},
		"missing device node": {
			row:  devicetest.Row{Index: 5, NoNode: true},
			want: with(healthy(5), unhealthy("device node /dev/lpu5 missing")),
		},
		"bad dev string": {
			row: devicetest.Row{Index: 6, Dev: "509-6"},
			want: with(healthy(6), func(d *device.Device) {
				d.Major, d.Minor = 0, 0
				d.Health = device.Health{Reason: `dev attribute /sys/class/lpu/lpu6/dev: dev "509-6": want MAJOR:MINOR`}
			}),
		},
		"dev major out of range": {
			row: devicetest.Row{Index: 6, Dev: "4096:6"},
			want: with(healthy(6), func(d *device.Device) {
				d.Major, d.Minor = 0, 0
				d.Health = device.Health{Reason: `dev attribute /sys/class/lpu/lpu6/dev: dev "4096:6": major: "4096" exceeds 4095`}
			}),
		},
		"missing dev": {
			row: devicetest.Row{Index: 6, Omit: []string{"dev"}},
			want: with(healthy(6), func(d *device.Device) {
				d.Major, d.Minor = 0, 0
				d.Health = device.Health{Reason: "dev attribute /sys/class/lpu/lpu6/dev missing"}
			}),
		},
		"several reasons joined": {
			row:  devicetest.Row{Index: 7, Status: "HUNG", NoNode: true},
			want: with(healthy(7), unhealthy(`status "HUNG"; device node /dev/lpu7 missing`)),
		},
		"custom major and minor": {
			row:  devicetest.Row{Index: 1, Dev: "240:17"},
			want: with(healthy(1), func(d *device.Device) { d.Major, d.Minor = 240, 17 }),
		},
		"numa node": {
			row:  devicetest.Row{Index: 0, NUMA: "1"},
			want: with(healthy(0), func(d *device.Device) { d.NUMANode = 1 }),
		},
		"numa node -1": {
			row:  devicetest.Row{Index: 0, NUMA: "-1"},
			want: healthy(0),
		},
		"garbage numa node is unknown, device still healthy": {
			row:  devicetest.Row{Index: 0, NUMA: "zero"},
			want: healthy(0),
		},
		"pci link": {
			row:  devicetest.Row{Index: 0, PCI: "0000:3b:00.0"},
			want: with(healthy(0), func(d *device.Device) { d.PCIBusID = "0000:3b:00.0" }),
		},
		"non-pci device link ignored": {
			row:  devicetest.Row{Index: 0, PCI: "platform-lpu"},
			want: healthy(0),
		},
		"control characters in serial": {
			row:  devicetest.Row{Index: 0, Files: map[string]string{"serial": "AB\x1bC\n"}},
			want: with(healthy(0), func(d *device.Device) { d.Serial = "AB?C" }),
		},
		"no serial, firmware or model": {
			row:  devicetest.Row{Index: 0, Omit: []string{"serial", "firmware_version", "model"}},
			want: with(healthy(0), func(d *device.Device) { d.Serial, d.Firmware, d.Model = "", "", "" }),
		},
		"model with a newline inside": {
			row:  devicetest.Row{Index: 0, Files: map[string]string{"model": "LPU\nX200\n"}},
			want: with(healthy(0), func(d *device.Device) { d.Model = "LPU?X200" }),
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			root := devicetest.NewTree(t, tc.row)
			if tc.setup != nil {
				tc.setup(t, root)
			}
			inv := discover(t, root)
			if len(inv.Devices) != 1 {
				t.Fatalf("got %d devices, want 1", len(inv.Devices))
			}
			want := tc.want
			want.Nodes = []device.Node{{Path: want.Path, Major: want.Major, Minor: want.Minor}}
			if want.PCIBusID != "" {
				want.PCIFunctions = []string{want.PCIBusID}
			}
			if got := inv.Devices[0]; !reflect.DeepEqual(got, want) {
				t.Errorf("device:\n got %+v\nwant %+v", got, want)
			}
			if got := device.NewSysfs(root).ProbeHealth(tc.want.ID); got != tc.want.Health {
				t.Errorf("ProbeHealth = %+v, want %+v", got, tc.want.Health)
			}
			if inv.DriverVersion != devicetest.DriverVersion {
				t.Errorf("driver version %q, want %q", inv.DriverVersion, devicetest.DriverVersion)
			}
		})
	}
}

func TestDiscoverTree(t *testing.T) {
	tests := map[string]struct {
		rows  []devicetest.Row
		setup func(t *testing.T, root string)
		want  []string // IDs in order
		bad   []string // unhealthy IDs
	}{
		"empty class dir": {},
		"sorted by index, not name": {
			rows: []devicetest.Row{{Index: 10}, {Index: 2}, {Index: 1}},
			want: []string{"lpu1", "lpu2", "lpu10"},
		},
		"non-lpu entries ignored": {
			rows: []devicetest.Row{{Index: 0}, {Index: 1}},
			setup: func(t *testing.T, root string) {
				class := filepath.Join(root, device.ClassDir)
				for _, name := range []string{"lpu", "lpu01", "lpux", "lpu-1", "LPU2", "gpu0", "lpu65536", ".lpu3.tmp"} {
					if err := os.Mkdir(filepath.Join(class, name), 0o755); err != nil {
						t.Fatal(err)
					}
				}
				if err := os.WriteFile(filepath.Join(class, "power"), nil, 0o644); err != nil {
					t.Fatal(err)
				}
			},
			want: []string{"lpu0", "lpu1"},
		},
		"broken devices do not hide the others": {
			rows: []devicetest.Row{
				{Index: 0}, {Index: 1, Status: "DEAD"}, {Index: 2, Dev: ""}, {Index: 3, NoNode: true},
				{Index: 4, Omit: []string{"status", "dev", "serial", "firmware_version"}},
			},
			want: []string{"lpu0", "lpu1", "lpu2", "lpu3", "lpu4"},
			bad:  []string{"lpu1", "lpu3", "lpu4"},
		},
		"class entry that is a plain file": {
			rows: []devicetest.Row{{Index: 0}},
			setup: func(t *testing.T, root string) {
				if err := os.WriteFile(filepath.Join(root, device.ClassDir, "lpu1"), nil, 0o644); err != nil {
					t.Fatal(err)
				}
			},
			want: []string{"lpu0", "lpu1"},
			bad:  []string{"lpu1"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			root := devicetest.NewTree(t, tc.rows...)
			if tc.setup != nil {
				tc.setup(t, root)
			}
			inv := discover(t, root)
			var ids, bad []string
			for _, d := range inv.Devices {
				ids = append(ids, d.ID)
				if !d.Health.Healthy {
					bad = append(bad, d.ID)
					if d.Health.Reason == "" {
						t.Errorf("%s unhealthy without a reason", d.ID)
					}
				}
			}
			if !slices.Equal(ids, tc.want) {
				t.Errorf("devices %v, want %v", ids, tc.want)
			}
			if !slices.Equal(bad, tc.bad) {
				t.Errorf("unhealthy %v, want %v", bad, tc.bad)
			}
			if len(tc.want) == 0 && len(inv.Rings) != 0 {
				t.Errorf("rings %v without devices", inv.Rings)
			}
			if len(tc.want) > 0 && !reflect.DeepEqual(inv.Rings, [][]string{tc.want}) {
				t.Errorf("rings %v, want one ring in index order", inv.Rings)
			}
		})
	}
}

func TestDiscoverMissingClassDir(t *testing.T) {
	root := t.TempDir()
	_, err := device.NewSysfs(root).Discover(context.Background())
	if !errors.Is(err, device.ErrNoDriver) {
		t.Fatalf("err = %v, want ErrNoDriver", err)
	}
	if !strings.Contains(err.Error(), filepath.Join(root, "sys/class/lpu")) {
		t.Errorf("error %q does not name the path read", err)
	}
}

func TestDiscoverCanceled(t *testing.T) {
	root := devicetest.NewTree(t, devicetest.Row{Index: 0})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := device.NewSysfs(root).Discover(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

// Whatever is broken, nothing discovery reports may name the temp root.
func TestHostPathsNeverUnderRoot(t *testing.T) {
	root := devicetest.NewTree(t,
		devicetest.Row{Index: 0, PCI: "0000:10:00.0"},
		devicetest.Row{Index: 1, Omit: []string{"status", "dev"}, NoNode: true},
		devicetest.Row{Index: 2, Dev: "x:y", Status: "BAD"},
		devicetest.Row{Index: 3, Files: map[string]string{"status": strings.Repeat("X", 5000)}},
	)
	s := device.NewSysfs(root)
	inv := discover(t, root)
	for _, d := range inv.Devices {
		for _, s := range []string{d.Path, d.Health.Reason, d.PCIBusID, d.Serial, d.Firmware, d.Model} {
			if strings.Contains(s, root) {
				t.Errorf("%s: %q contains the discovery root", d.ID, s)
			}
		}
		if d.Path != "/dev/"+d.ID {
			t.Errorf("%s: path %q", d.ID, d.Path)
		}
	}
	for _, id := range []string{"lpu0", "lpu1", "lpu2", "lpu3", "lpu9"} {
		if h := s.ProbeHealth(id); strings.Contains(h.Reason, root) {
			t.Errorf("ProbeHealth(%s) reason %q contains the root", id, h.Reason)
		}
	}
}

func TestProbeHealthFollowsChanges(t *testing.T) {
	root := devicetest.NewTree(t, devicetest.Row{Index: 0}, devicetest.Row{Index: 1})
	s := device.NewSysfs(root)
	steps := []struct {
		do   func()
		want device.Health
	}{
		{func() {}, device.Health{Healthy: true}},
		{func() { devicetest.SetStatus(t, root, "lpu1", "THERMAL_TRIP") }, device.Health{Reason: `status "THERMAL_TRIP"`}},
		{func() { devicetest.SetStatus(t, root, "lpu1", "BUSY") }, device.Health{Healthy: true}},
		{func() { devicetest.RemoveNode(t, root, "lpu1") }, device.Health{Reason: "device node /dev/lpu1 missing"}},
		{func() { devicetest.CreateNode(t, root, "lpu1") }, device.Health{Healthy: true}},
		{func() { devicetest.RemoveAttr(t, root, "lpu1", "status") }, device.Health{Reason: "status file /sys/class/lpu/lpu1/status missing"}},
	}
	for i, st := range steps {
		st.do()
		if got := s.ProbeHealth("lpu1"); got != st.want {
			t.Errorf("step %d: ProbeHealth = %+v, want %+v", i, got, st.want)
		}
		if got := s.ProbeHealth("lpu0"); !got.Healthy {
			t.Errorf("step %d: lpu0 changed: %+v", i, got)
		}
	}
	for _, id := range []string{"lpu7", "gpu0", "lpu01", ""} {
		if h := s.ProbeHealth(id); h.Healthy || h.Reason == "" {
			t.Errorf("ProbeHealth(%q) = %+v, want unhealthy with reason", id, h)
		}
	}
}

func TestWatchPaths(t *testing.T) {
	root := devicetest.NewTree(t, devicetest.Row{Index: 0}, devicetest.Row{Index: 1})
	want := []string{
		filepath.Join(root, "sys/class/lpu"),
		filepath.Join(root, "sys/class/lpu/lpu0"),
		filepath.Join(root, "sys/class/lpu/lpu1"),
		filepath.Join(root, "dev"),
	}
	if got := device.NewSysfs(root).WatchPaths(); !slices.Equal(got, want) {
		t.Errorf("WatchPaths = %v, want %v", got, want)
	}
	if got := device.NewSysfs(t.TempDir()).WatchPaths(); len(got) != 0 {
		t.Errorf("WatchPaths of an empty root = %v", got)
	}
}

package device_test

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/device/devicesim"
)

// orion writes a simulated Orion node of n cards (with its distractors:
// another vendor's device, a management-only Xilinx function of another
// model, a plain rom file, instance numbers that are not 0, bus numbers
// 17 18 31 32 b1 b2 ca cb) and returns its root.
func orion(t testing.TB, n int) string {
	t.Helper()
	root := t.TempDir()
	if err := devicesim.Write(root, devicesim.Spec{Devices: n, Rings: 1, Backend: device.BackendXilinx}); err != nil {
		t.Fatal(err)
	}
	return root
}

// fn is the host directory (under root) of a PCI function.
func fn(root, addr string) string { return filepath.Join(root, device.PCIDevicesDir, addr) }

func write(t testing.TB, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func glob1(t testing.TB, pattern string) string {
	t.Helper()
	m, err := filepath.Glob(pattern)
	if err != nil || len(m) != 1 {
		t.Fatalf("glob %s: %v %v", pattern, m, err)
	}
	return m[0]
}

func xilinx(root string, opts ...device.Option) *device.Sysfs {
	return device.NewSysfs(root, append([]device.Option{device.WithLogger(quiet),
		device.WithDiscovery(device.Discovery{Backend: device.BackendXilinx, Xilinx: device.XilinxOptions{Shell: device.DefaultXilinxShell}})}, opts...)...)
}

// card2 is the user function of the third simulated card (bus 0x31).
var card2 = devicesim.XilinxAddress(2)

func TestXilinxHealthyNode(t *testing.T) {
	root := orion(t, 8)
	s := xilinx(root, device.WithNetworkTable(device.DefaultNetworkTable))
	inv, err := s.Discover(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.Devices) != 8 {
		t.Fatalf("got %d devices, want 8 (distractors must be skipped)", len(inv.Devices))
	}
	wantAddr := []string{"0000:17:00.1", "0000:18:00.1", "0000:31:00.1", "0000:32:00.1", "0000:b1:00.1", "0000:b2:00.1", "0000:ca:00.1", "0000:cb:00.1"}
	for i, d := range inv.Devices {
		if d.ID != device.ID(i) || d.PCIBusID != wantAddr[i] || !d.Health.Healthy {
			t.Fatalf("device %d: %+v", i, d)
		}
		inst := int64(0)
		for _, c := range wantAddr[i][5:7] {
			inst = inst*16 + int64(strings.IndexRune("0123456789abcdef", c))
		}
		want := []device.Node{
			{Path: "/dev/dri/renderD" + strconv.Itoa(128+i), Major: devicesim.RenderMajor, Minor: int64(128 + i)},
			{Path: "/dev/xclmgmt" + strconv.Itoa(int(inst<<8)), Major: devicesim.XclmgmtMajor, Minor: int64(i)},
		}
		if !reflect.DeepEqual(d.Nodes, want) || d.Path != want[0].Path || d.Major != want[0].Major || d.Minor != want[0].Minor {
			t.Errorf("%s nodes %+v (path %s %d:%d), want %+v", d.ID, d.Nodes, d.Path, d.Major, d.Minor, want)
		}
		if !reflect.DeepEqual(d.PCIFunctions, []string{wantAddr[i], wantAddr[i][:10] + ".0"}) {
			t.Errorf("%s functions %v", d.ID, d.PCIFunctions)
		}
		if d.Model != "u55c" || d.Firmware != device.DefaultXilinxShell || d.Serial == "" || d.NUMANode != i/4 {
			t.Errorf("%s attributes %+v", d.ID, d)
		}
	}
	if inv.DriverVersion != "2.15.225" || inv.Backend != device.BackendXilinx {
		t.Errorf("driver version %q backend %q", inv.DriverVersion, inv.Backend)
	}
	// The table is keyed by addresses (user and management functions
	// mixed) and its ring does not follow address order: cabled 0 2 4 6 7
	// 5 3 1, read from lpu0 toward its lower-indexed neighbour.
	if want := [][]string{{"lpu0", "lpu1", "lpu3", "lpu5", "lpu7", "lpu6", "lpu4", "lpu2"}}; !reflect.DeepEqual(inv.Rings, want) {
		t.Errorf("rings %v, want %v", inv.Rings, want)
	}
	if inv.Rings[0][2] == "lpu2" {
		t.Error("simulated ring follows address order; the test would not tell")
	}
	tel, err := s.Telemetry("lpu1")
	if err != nil {
		t.Fatal(err)
	}
	if tel.TemperatureCelsius != 42 || tel.PowerWatts != 22.5 || tel.MemoryTotalBytes != 16<<30 ||
		!reflect.DeepEqual(tel.Missing, []string{device.AttrUtilization, device.AttrMemoryUsed}) {
		t.Errorf("telemetry %+v", tel)
	}
}

func TestXilinxFaults(t *testing.T) {
	mgmt2 := card2[:10] + ".0"
	tests := map[string]struct {
		setup   func(t *testing.T, root string)
		opts    device.XilinxOptions
		noShell bool   // no configured shell
		id      string // the device to check; default lpu2
		reason  string // "" means healthy
		nodes   int    // expected node count; default 2
	}{
		"ready 0x0": {
			setup:  func(t *testing.T, root string) { write(t, fn(root, card2)+"/ready", "0x0\n") },
			reason: "ready 0x0 in /sys/bus/pci/devices/0000:31:00.1/ready, want 1",
		},
		"ready 1 without prefix is healthy": {
			setup: func(t *testing.T, root string) { write(t, fn(root, card2)+"/ready", "1\n") },
		},
		"dev_offline": {
			setup:  func(t *testing.T, root string) { write(t, fn(root, card2)+"/dev_offline", "1\n") },
			reason: "dev_offline 1 in /sys/bus/pci/devices/0000:31:00.1/dev_offline, want 0",
		},
		"device_bad_state": {
			setup:  func(t *testing.T, root string) { write(t, fn(root, card2)+"/device_bad_state", "1\n") },
			reason: "device_bad_state 1 in",
		},
		"wrong shell": {
			setup: func(t *testing.T, root string) {
				write(t, glob1(t, fn(root, card2)+"/rom.u.*")+"/VBNV", "xilinx_u250_gen3x16_xdma_shell_4_1\n")
			},
			reason: `shell "xilinx_u250_gen3x16_xdma_shell_4_1" in /sys/bus/pci/devices/0000:31:00.1/rom.u.`,
		},
		"wrong shell not checked without a configured shell": {
			setup: func(t *testing.T, root string) {
				write(t, glob1(t, fn(root, card2)+"/rom.u.*")+"/VBNV", "xilinx_u250_gen3x16_xdma_shell_4_1\n")
			},
			noShell: true,
		},
		"render node directory missing": {
			setup: func(t *testing.T, root string) {
				if err := os.RemoveAll(glob1(t, fn(root, card2)+"/drm/renderD*")); err != nil {
					t.Fatal(err)
				}
			},
			reason: "render node missing: /sys/bus/pci/devices/0000:31:00.1/drm has no renderDN",
			nodes:  1,
		},
		"render device node missing": {
			setup: func(t *testing.T, root string) {
				if err := os.Remove(filepath.Join(root, "/dev/dri/renderD130")); err != nil {
					t.Fatal(err)
				}
			},
			reason: "device node /dev/dri/renderD130 missing",
		},
		"management device node missing": {
			setup: func(t *testing.T, root string) {
				if err := os.Remove(filepath.Join(root, "/dev/xclmgmt12544")); err != nil {
					t.Fatal(err)
				}
			},
			reason: "device node /dev/xclmgmt12544 missing",
		},
		"management node not injected": {
			setup: func(t *testing.T, root string) {
				if err := os.Remove(filepath.Join(root, "/dev/xclmgmt12544")); err != nil {
					t.Fatal(err)
				}
			},
			opts:  device.XilinxOptions{Shell: device.DefaultXilinxShell, NoManagementNodes: true},
			nodes: 1,
		},
		"driver is not xocl": {
			setup: func(t *testing.T, root string) {
				link := fn(root, card2) + "/driver"
				if err := os.Remove(link); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink("../../../bus/pci/drivers/vfio-pci", link); err != nil {
					t.Fatal(err)
				}
			},
			reason: `0000:31:00.1 bound to driver "vfio-pci", want xocl`,
		},
		"no driver bound": {
			setup:  func(t *testing.T, root string) { rm(t, fn(root, card2)+"/driver") },
			reason: "0000:31:00.1 bound to no driver, want xocl",
		},
		"management function missing": {
			setup:  func(t *testing.T, root string) { rm(t, fn(root, mgmt2)) },
			reason: "management function of card 0000:31:00 missing",
			nodes:  1,
		},
		"management function missing, nodes not injected": {
			setup: func(t *testing.T, root string) { rm(t, fn(root, mgmt2)) },
			opts:  device.XilinxOptions{Shell: device.DefaultXilinxShell, NoManagementNodes: true},
			nodes: 1,
		},
		// Issue 21: a card keeps its address rank (it was numbered last).
		"management-only card: no shell flashed, keeps its address rank": {
			setup:  func(t *testing.T, root string) { rm(t, fn(root, card2)) },
			reason: "no shell flashed: card 0000:31:00 has management function 0000:31:00.0 but no user function",
			nodes:  1,
		},
		"management side not ready": {
			setup:  func(t *testing.T, root string) { write(t, fn(root, mgmt2)+"/ready", "0\n") },
			reason: "ready 0 in /sys/bus/pci/devices/0000:31:00.0/ready, want 1",
		},
		"management side not ready, its node not injected": {
			setup: func(t *testing.T, root string) { write(t, fn(root, mgmt2)+"/ready", "0\n") },
			opts:  device.XilinxOptions{Shell: device.DefaultXilinxShell, NoManagementNodes: true},
			nodes: 1,
		},
		"two cards claim one instance": {
			setup:  func(t *testing.T, root string) { write(t, fn(root, mgmt2)+"/instance", "6144\n") },
			id:     "lpu1",
			reason: "instance 6144 in /sys/bus/pci/devices/0000:18:00.0/instance also claimed by 0000:31:00.0",
		},
		"unreadable PCI entry is skipped, the scan goes on": {
			setup: func(t *testing.T, root string) {
				dir := filepath.Join(root, "/sys/devices/pci0000:00/0000:00:02.0")
				if err := os.MkdirAll(dir+"/vendor", 0o755); err != nil { // a directory where the vendor file should be
					t.Fatal(err)
				}
				if err := os.Symlink("../../../devices/pci0000:00/0000:00:02.0", fn(root, "0000:00:02.0")); err != nil {
					t.Fatal(err)
				}
			},
		},
		"xmc missing: serial empty, card healthy": {
			setup: func(t *testing.T, root string) {
				if err := os.RemoveAll(glob1(t, fn(root, card2)+"/xmc.u.*")); err != nil {
					t.Fatal(err)
				}
			},
		},
		"rom subdevice missing with a shell configured": {
			setup: func(t *testing.T, root string) {
				if err := os.RemoveAll(glob1(t, fn(root, card2)+"/rom.u.*")); err != nil {
					t.Fatal(err)
				}
			},
			reason: "shell unknown: /sys/bus/pci/devices/0000:31:00.1 has no rom.* directory",
		},
		"render node of another number": {
			setup: func(t *testing.T, root string) {
				p := filepath.Join(root, "/dev/dri/renderD130")
				rm(t, p)
				if err := unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(226, 200))); err != nil {
					t.Skipf("mknod: %v", err)
				}
			},
			reason: "device node /dev/dri/renderD130 is 226:200 but sysfs says 226:130",
		},
		"management node is a directory": {
			setup: func(t *testing.T, root string) {
				p := filepath.Join(root, "/dev/xclmgmt12544")
				rm(t, p)
				if err := os.Mkdir(p, 0o755); err != nil {
					t.Fatal(err)
				}
			},
			reason: "device node /dev/xclmgmt12544 is not a character device",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			root := orion(t, 4)
			if tc.setup != nil {
				tc.setup(t, root)
			}
			opts := tc.opts
			if opts == (device.XilinxOptions{}) && !tc.noShell {
				opts.Shell = device.DefaultXilinxShell
			}
			s := device.NewSysfs(root, device.WithLogger(quiet), device.WithDiscovery(device.Discovery{Backend: device.BackendXilinx, Xilinx: opts}))
			inv, err := s.Discover(context.Background())
			if err != nil {
				t.Fatalf("Discover: %v", err)
			}
			if len(inv.Devices) != 4 {
				t.Fatalf("%d devices, want 4 (broken cards are reported, not dropped)", len(inv.Devices))
			}
			id := tc.id
			if id == "" {
				id = "lpu2"
			}
			d, _ := inv.Device(id)
			switch {
			case tc.reason == "" && !d.Health.Healthy:
				t.Fatalf("%s unhealthy: %s", id, d.Health.Reason)
			case tc.reason != "" && (d.Health.Healthy || !strings.Contains(d.Health.Reason, tc.reason)):
				t.Fatalf("%s health %+v, want reason containing %q", id, d.Health, tc.reason)
			}
			if strings.Contains(d.Health.Reason, root) {
				t.Fatalf("reason names the discovery root: %s", d.Health.Reason)
			}
			if h := s.ProbeHealth(id); h != d.Health {
				t.Fatalf("ProbeHealth %+v differs from Discover %+v", h, d.Health)
			}
			nodes := tc.nodes
			if nodes == 0 {
				nodes = 2
			}
			if len(d.Nodes) != nodes {
				t.Fatalf("%s has %d nodes %+v, want %d", id, len(d.Nodes), d.Nodes, nodes)
			}
			for _, o := range inv.Devices {
				if o.ID != id && tc.id == "" && !o.Health.Healthy {
					t.Errorf("fault on %s made %s unhealthy: %s", id, o.ID, o.Health.Reason)
				}
			}
		})
	}
}

func rm(t *testing.T, path string) {
	t.Helper()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
}

func TestXilinxReadyFlipsBack(t *testing.T) {
	root := orion(t, 4)
	s := xilinx(root)
	if _, err := s.Discover(context.Background()); err != nil {
		t.Fatal(err)
	}
	ready := fn(root, card2) + "/ready"
	write(t, ready, "0x0\n")
	if h := s.ProbeHealth("lpu2"); h.Healthy {
		t.Fatal("ready=0x0 still healthy")
	}
	write(t, ready, "0x1\n")
	if h := s.ProbeHealth("lpu2"); !h.Healthy {
		t.Fatalf("ready=0x1 unhealthy: %s", h.Reason)
	}
}

func TestXilinxTelemetryHwmonFallback(t *testing.T) {
	root := orion(t, 4)
	if err := os.RemoveAll(glob1(t, fn(root, card2)+"/xmc.u.*")); err != nil {
		t.Fatal(err)
	}
	s := xilinx(root)
	tel, err := s.Telemetry("lpu2")
	if err != nil {
		t.Fatal(err)
	}
	// hwmon temp4_input is millidegrees; power has no source without xmc.
	if tel.TemperatureCelsius != 43 || !reflect.DeepEqual(tel.Missing, []string{device.AttrUtilization, device.AttrMemoryUsed, device.AttrPower}) {
		t.Errorf("telemetry %+v", tel)
	}
	write(t, glob1(t, fn(root, card2)+"/hwmon/hwmon*")+"/temp4_input", "hot\n")
	if _, err := s.Telemetry("lpu2"); err == nil || !strings.Contains(err.Error(), "/sys/bus/pci/devices/0000:31:00.1/hwmon/") {
		t.Errorf("garbage temperature: %v", err)
	}
}

func TestXilinxTopology(t *testing.T) {
	table := "/etc/lpu/orion.table"
	tests := map[string]struct {
		table    string // "" means no table
		rings    [][]string
		want     [][]string
		err      string
		warnings string // a substring of the log
	}{
		"addresses not in address order": {
			table: "0000:17:00.1 0000:31:00.1\n0000:31:00.0 0000:18:00.1\n0000:18:00.1 0000:32:00.0\n0000:32:00.1 0000:17:00.0\n",
			want:  [][]string{{"lpu0", "lpu2", "lpu1", "lpu3"}},
		},
		"upper-case addresses and lpu IDs mixed": {
			table: "0000:17:00.1 lpu1\nlpu1 0000:31:00.1\n0000:31:00.1 0000:32:00.1\n0000:32:00.1 lpu0\n",
			want:  [][]string{{"lpu0", "lpu1", "lpu2", "lpu3"}},
		},
		"unknown address": {
			table: "0000:17:00.1 0000:18:00.1\n0000:18:00.1 0000:99:00.1\n",
			err:   "network table /etc/lpu/orion.table line 2: 0000:99:00.1 is not a PCI function of an LPU discovered on this node",
		},
		"address of another vendor's device": {
			table: "0000:00:1f.3 0000:18:00.1\n",
			err:   "line 1: 0000:00:1f.3 is not a PCI function",
		},
		"duplicate link through the other function": {
			table: "0000:17:00.1 0000:18:00.1\n0000:17:00.0 0000:18:00.0\n",
			err:   "line 2: duplicate link 0000:17:00.0 (lpu0) 0000:18:00.0 (lpu1) (first on line 1)",
		},
		"both functions of one card linked": {
			table: "0000:17:00.1 0000:17:00.0\n",
			err:   "line 1: 0000:17:00.1 and 0000:17:00.0 are one card (lpu0): linked to itself",
		},
		"card missing from the table": {
			table: "0000:17:00.1 0000:18:00.1\n",
			err:   "lpu2, lpu3 discovered but not in the table",
		},
		"no table, no rings: address order with a warning": {
			want:     [][]string{{"lpu0", "lpu1", "lpu2", "lpu3"}},
			warnings: "PCI address order",
		},
		"rings in config win, no warning": {
			rings: [][]string{{"lpu3", "lpu1", "lpu0", "lpu2"}},
			want:  [][]string{{"lpu3", "lpu1", "lpu0", "lpu2"}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			root := orion(t, 4)
			rm(t, filepath.Join(root, device.DefaultNetworkTable))
			if tc.table != "" {
				write(t, filepath.Join(root, table), tc.table)
			}
			var logs bytes.Buffer
			s := device.NewSysfs(root, device.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))),
				device.WithDiscovery(device.Discovery{Backend: device.BackendXilinx}),
				device.WithTopology(device.TopologyAuto, tc.rings, map[bool]string{true: table}[tc.table != ""]))
			inv, err := s.Discover(context.Background())
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(inv.Rings, tc.want) {
				t.Errorf("rings %v, want %v", inv.Rings, tc.want)
			}
			if got := strings.Contains(logs.String(), "PCI address order"); got != (tc.warnings != "") {
				t.Errorf("address-order warning logged %v: %s", got, logs.String())
			}
		})
	}
}

func TestXilinxSimulateIdempotentAndShrinks(t *testing.T) {
	root := orion(t, 8)
	write(t, fn(root, card2)+"/ready", "0x0\n")
	if err := devicesim.Write(root, devicesim.Spec{Devices: 4, Rings: 1, Backend: device.BackendXilinx}); err != nil {
		t.Fatal(err)
	}
	inv, err := xilinx(root).Discover(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.Devices) != 4 {
		t.Fatalf("%d devices after shrinking to 4", len(inv.Devices))
	}
	if d, _ := inv.Device("lpu2"); d.Health.Healthy {
		t.Error("a rerun reset the live ready attribute")
	}
	for _, p := range []string{"/dev/dri/renderD132", "/dev/xclmgmt45312", device.PCIDevicesDir + "/0000:b1:00.1"} {
		if _, err := os.Lstat(filepath.Join(root, p)); err == nil {
			t.Errorf("%s left from the larger simulation", p)
		}
	}
	if _, err := os.Lstat(fn(root, "0000:00:1f.3")); err != nil {
		t.Error("the other vendor's device was pruned")
	}
}

func pciNode(t testing.TB, n int) (string, *device.Sysfs) {
	root := t.TempDir()
	if err := devicesim.Write(root, devicesim.Spec{Devices: n, Rings: 1, Backend: device.BackendPCI}); err != nil {
		t.Fatal(err)
	}
	return root, device.NewSysfs(root, device.WithLogger(quiet), device.WithDiscovery(device.Discovery{Backend: device.BackendPCI}))
}

type fakeLib map[string]device.Health

func (f fakeLib) CheckHealth(id, addr string) device.Health {
	if h, ok := f[addr]; ok {
		return h
	}
	return device.Health{Healthy: true}
}

func TestPCIBackend(t *testing.T) {
	addr1 := devicesim.PCIAddress(1)
	tests := map[string]struct {
		setup  func(t *testing.T, root string)
		opts   device.PCIOptions
		reason string
	}{
		"healthy": {},
		"node directory missing, class directory configured": {
			setup:  func(t *testing.T, root string) { must(t, os.RemoveAll(fn(root, addr1)+"/ha")) },
			opts:   device.PCIOptions{ClassDir: "ha"},
			reason: "device node unknown: /sys/bus/pci/devices/0000:3c:00.0/ha has no directory with a dev attribute",
		},
		"node directory missing, class directory scanned": {
			setup:  func(t *testing.T, root string) { must(t, os.RemoveAll(fn(root, addr1)+"/ha")) },
			reason: "device node unknown: /sys/bus/pci/devices/0000:3c:00.0 has no <dir>/<name>/dev",
		},
		"device node missing": {
			setup:  func(t *testing.T, root string) { rm(t, filepath.Join(root, "/dev/ha1")) },
			reason: "device node /dev/ha1 missing",
		},
		"health attribute says no": {
			setup:  func(t *testing.T, root string) { write(t, fn(root, addr1)+"/ha/ha2/state", "0\n") },
			opts:   device.PCIOptions{HealthAttribute: "ha/ha2/state"},
			reason: `/sys/bus/pci/devices/0000:3c:00.0/ha/ha2/state is "0", want "1"`,
		},
		"health attribute missing": {
			opts:   device.PCIOptions{HealthAttribute: "state"},
			reason: "health attribute /sys/bus/pci/devices/0000:3c:00.0/state missing",
		},
		"vendor library seam": {
			opts:   device.PCIOptions{Health: fakeLib{addr1: {Reason: "libha_driver: thermal trip"}}},
			reason: "libha_driver: thermal trip",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			root, _ := pciNode(t, 3)
			if tc.setup != nil {
				tc.setup(t, root)
			}
			s := device.NewSysfs(root, device.WithLogger(quiet), device.WithDiscovery(device.Discovery{Backend: device.BackendPCI, PCI: tc.opts}))
			inv, err := s.Discover(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if len(inv.Devices) != 3 {
				t.Fatalf("%d devices, want 3 (the other class and vendor are distractors)", len(inv.Devices))
			}
			d := inv.Devices[1]
			if d.ID != "lpu1" || d.PCIBusID != addr1 {
				t.Fatalf("IDs do not follow address order: %+v", d)
			}
			if tc.reason == "" {
				// Nodes are numbered in probe order (the reverse here):
				// the ID never comes from the node name.
				if !d.Health.Healthy || d.Path != "/dev/ha1" || d.Major != devicesim.HAMajor || d.Minor != 1 || len(d.Nodes) != 1 {
					t.Fatalf("%+v", d)
				}
				if inv.Devices[0].Path != "/dev/ha2" {
					t.Fatalf("lpu0 node %s, want /dev/ha2", inv.Devices[0].Path)
				}
			} else if d.Health.Healthy || !strings.Contains(d.Health.Reason, tc.reason) {
				t.Fatalf("health %+v, want %q", d.Health, tc.reason)
			}
			if h := s.ProbeHealth("lpu1"); h != d.Health {
				t.Fatalf("ProbeHealth %+v differs from %+v", h, d.Health)
			}
			tel, err := s.Telemetry("lpu1")
			if err != nil || len(tel.Missing) != 5 {
				t.Fatalf("telemetry %+v %v: want everything missing", tel, err)
			}
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestCheckDiscovery(t *testing.T) {
	tests := map[string]struct {
		d   device.Discovery
		err string
	}{
		"zero is lpu":       {},
		"xilinx defaults":   {d: device.Discovery{Backend: device.BackendXilinx}},
		"unknown backend":   {d: device.Discovery{Backend: "gpu"}, err: `discovery backend "gpu": want lpu, xilinx, pci`},
		"bad vendor":        {d: device.Discovery{Xilinx: device.XilinxOptions{Vendor: "10ee"}}, err: `xilinx vendor "10ee"`},
		"upper case is ok":  {d: device.Discovery{PCI: device.PCIOptions{Vendor: "0x1EFF"}}},
		"short class":       {d: device.Discovery{PCI: device.PCIOptions{Class: "0x12"}}, err: `pci class "0x12"`},
		"class dir escape":  {d: device.Discovery{PCI: device.PCIOptions{ClassDir: ".."}}, err: `pci classDir ".."`},
		"health attr up":    {d: device.Discovery{PCI: device.PCIOptions{HealthAttribute: "../x"}}, err: "healthAttribute"},
		"class dir scanned": {d: device.Discovery{Backend: device.BackendPCI, PCI: device.PCIOptions{ClassDir: ""}}},
		"driver name":       {d: device.Discovery{PCI: device.PCIOptions{Driver: "ha"}}},
		"driver path":       {d: device.Discovery{PCI: device.PCIOptions{Driver: "a/b"}}, err: `pci driver "a/b"`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := device.CheckDiscovery(tc.d)
			if (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("err %v, want %q", err, tc.err)
			}
		})
	}
}

// TestDeviceEqual changes every field of a Device in turn: Equal must see
// each change, so a field added later cannot be forgotten silently.
func TestDeviceEqual(t *testing.T) {
	base := device.Device{ID: "lpu1", Index: 1, Path: "/dev/dri/renderD129", Major: 226, Minor: 129,
		Nodes: []device.Node{{Path: "/dev/dri/renderD129", Major: 226, Minor: 129}}, PCIFunctions: []string{"0000:18:00.1"}}
	same := base
	same.Nodes = slices.Clone(base.Nodes)
	if !base.Equal(&same) {
		t.Fatal("a copy is not Equal")
	}
	typ := reflect.TypeOf(base)
	for i := 0; i < typ.NumField(); i++ {
		o := base
		o.Nodes, o.PCIFunctions = slices.Clone(base.Nodes), slices.Clone(base.PCIFunctions)
		f := reflect.ValueOf(&o).Elem().Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString(f.String() + "x")
		case reflect.Int, reflect.Int64:
			f.SetInt(f.Int() + 1)
		case reflect.Struct:
			o.Health = device.Health{Healthy: true}
		case reflect.Slice:
			f.Set(reflect.Append(f, reflect.Zero(f.Type().Elem())))
		default:
			t.Fatalf("field %s of kind %s: extend this test", typ.Field(i).Name, f.Kind())
		}
		if base.Equal(&o) {
			t.Errorf("Equal misses a change of %s", typ.Field(i).Name)
		}
	}
}

func BenchmarkDiscoverOrion8(b *testing.B) {
	root := orion(b, 8)
	s := device.NewSysfs(root, device.WithLogger(quiet), device.WithNetworkTable(device.DefaultNetworkTable),
		device.WithDiscovery(device.Discovery{Backend: device.BackendXilinx, Xilinx: device.XilinxOptions{Shell: device.DefaultXilinxShell}}))
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Discover(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkProbeHealthOrion(b *testing.B) {
	root := orion(b, 8)
	s := xilinx(root)
	if _, err := s.Discover(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if h := s.ProbeHealth("lpu5"); !h.Healthy {
			b.Fatal(h.Reason)
		}
	}
}

func TestPCISimulateShrinks(t *testing.T) {
	root, _ := pciNode(t, 4)
	if err := devicesim.Write(root, devicesim.Spec{Devices: 2, Rings: 1, Backend: device.BackendPCI}); err != nil {
		t.Fatal(err)
	}
	inv, err := device.NewSysfs(root, device.WithLogger(quiet), device.WithDiscovery(device.Discovery{Backend: device.BackendPCI})).Discover(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.Devices) != 2 || inv.Devices[0].Path != "/dev/ha1" || !inv.Devices[0].Health.Healthy {
		t.Fatalf("after shrinking to 2: %+v", inv.Devices)
	}
	for _, p := range []string{"/dev/ha2", "/dev/ha3", device.PCIDevicesDir + "/" + devicesim.PCIAddress(2)} {
		if _, err := os.Lstat(filepath.Join(root, p)); err == nil {
			t.Errorf("%s left from the larger simulation", p)
		}
	}
	if _, err := os.Lstat(fn(root, "0000:3a:00.0")); err != nil {
		t.Error("the same-vendor distractor of another class was pruned")
	}
	if m, _ := filepath.Glob(fn(root, devicesim.PCIAddress(0)) + "/ha/*"); len(m) != 1 || filepath.Base(m[0]) != "ha1" {
		t.Errorf("node directories of lpu0 after renumbering: %v", m)
	}
}

// Package devicetest builds fake LPU node trees for tests, one table row per
// device, with real files under t.TempDir(), in the layout package device
// reads.
//
//	root := devicetest.NewTree(t,
//		devicetest.Row{Index: 0},
//		devicetest.Row{Index: 1, Status: "ECC_ERROR"},
//		devicetest.Row{Index: 2, NoNode: true},
//	)
//	inv, err := device.NewSysfs(root).Discover(ctx)
package devicetest

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/hyperaccel/lpu-node/internal/atomicfile"
	"github.com/hyperaccel/lpu-node/pkg/device"
)

// DriverVersion is what NewTree writes to /sys/module/lpu/version.
const DriverVersion = "1.0.0-test"

// Ring places a device on a ring through the ring_id and ring_position
// attributes.
type Ring struct{ ID, Position int }

// Row describes one fake device. Zero values give a healthy device: status
// READY, dev "<DefaultMajor>:<Index>", a device node, serial, firmware and
// model.
type Row struct {
	Index  int
	Status string // written to status; "" means READY
	Dev    string // written to dev; "" means "<DefaultMajor>:<Index>"
	NoNode bool   // do not create /dev/lpuN
	NUMA   string // written to numa_node when not ""
	PCI    string // when not "", device links to /sys/devices/pci0000:00/<PCI>
	Ring   *Ring  // when not nil, write ring_id and ring_position
	// Omit lists attribute files not to write at all ("status", "dev", ...).
	Omit []string
	// Files are raw attribute contents (no newline added), by file name;
	// they override everything above.
	Files map[string]string
}

// Serial is the serial NewTree writes for a device index.
func Serial(index int) string { return fmt.Sprintf("TEST%04d", index) }

// Firmware is the firmware_version NewTree writes.
const Firmware = "0.9.0-test"

// Model is the model attribute NewTree writes.
const Model = "LPU Test Card"

// TelemetryRows are n rows whose LPUs report every telemetry file:
// utilisation 10·index %, 1 KiB of 16 GiB memory used, 45.5 °C, 75 W.
func TelemetryRows(n int) []Row {
	rows := make([]Row, n)
	for i := range rows {
		rows[i] = Row{Index: i, Files: map[string]string{
			device.AttrUtilization: strconv.Itoa(10*i) + "\n",
			device.AttrMemoryUsed:  "1024\n",
			device.AttrMemoryTotal: "17179869184\n",
			device.AttrTemperature: "45500\n",
			device.AttrPower:       "75000000\n",
		}}
	}
	return rows
}

// NewTree writes one device per row under a new t.TempDir() and returns that
// directory, the root to discover under. It always creates /sys/class/lpu
// (empty without rows), /dev and the driver version. Its device nodes are
// regular files, so it marks the tree (device.TreeMarker) too.
func NewTree(t testing.TB, rows ...Row) string {
	t.Helper()
	root := t.TempDir()
	WriteFile(t, root, device.TreeMarker, "devicetest\n")
	mkdir(t, filepath.Join(root, device.ClassDir))
	mkdir(t, filepath.Join(root, device.DevDir))
	WriteFile(t, root, device.ModuleVersion, DriverVersion+"\n")
	for _, r := range rows {
		AddDevice(t, root, r)
	}
	return root
}

// AddDevice writes one more device into a tree.
func AddDevice(t testing.TB, root string, r Row) {
	t.Helper()
	id := device.ID(r.Index)
	dir := filepath.Join(root, device.ClassDir, id)
	mkdir(t, dir)
	attrs := map[string]string{
		"status":           r.Status,
		"dev":              r.Dev,
		"serial":           Serial(r.Index),
		"firmware_version": Firmware,
		"model":            Model,
	}
	if r.Status == "" {
		attrs["status"] = device.StatusReady
	}
	if r.Dev == "" {
		attrs["dev"] = fmt.Sprintf("%d:%d", device.DefaultMajor, r.Index)
	}
	if r.NUMA != "" {
		attrs["numa_node"] = r.NUMA
	}
	if r.Ring != nil {
		attrs["ring_id"] = strconv.Itoa(r.Ring.ID)
		attrs["ring_position"] = strconv.Itoa(r.Ring.Position)
	}
	for _, name := range r.Omit {
		delete(attrs, name)
	}
	for name, v := range attrs {
		if _, raw := r.Files[name]; !raw {
			write(t, filepath.Join(dir, name), v+"\n")
		}
	}
	for name, v := range r.Files {
		write(t, filepath.Join(dir, name), v)
	}
	if r.PCI != "" {
		pci := filepath.Join(root, "sys/devices/pci0000:00", r.PCI)
		mkdir(t, pci)
		target, err := filepath.Rel(dir, pci) // relative, as sysfs links are
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, filepath.Join(dir, "device")); err != nil {
			t.Fatal(err)
		}
	}
	if !r.NoNode {
		write(t, filepath.Join(root, device.DevDir, id), "")
	}
	if major, _, err := device.ParseDev(strings.TrimSpace(attrs["dev"])); err == nil {
		RegisterMajor(t, root, major, "lpu")
	}
}

// RegisterMajor adds "major driver" to the tree's /proc/devices (its
// character devices), as the kernel does when a driver registers; the
// lpu driver's majors of every row are registered by AddDevice.
func RegisterMajor(t testing.TB, root string, major int64, driver string) {
	t.Helper()
	path := filepath.Join(root, device.ProcDevices)
	old, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	text := string(old)
	if text == "" {
		text = "Character devices:\n  1 mem\n\nBlock devices:\n  7 loop\n"
	}
	line := fmt.Sprintf("%3d %s\n", major, driver)
	if strings.Contains(text, line) {
		return
	}
	before, after, _ := strings.Cut(text, "\nBlock devices:")
	WriteFile(t, root, device.ProcDevices, before+line+"\nBlock devices:"+after)
}

// SetStatus replaces the status attribute of a device atomically.
func SetStatus(t testing.TB, root, id, status string) {
	t.Helper()
	WriteAttr(t, root, id, "status", status+"\n")
}

// WriteAttr replaces one attribute file of a device atomically (temporary
// file and rename), as a watcher would see a driver update.
func WriteAttr(t testing.TB, root, id, name, content string) {
	t.Helper()
	path := filepath.Join(root, device.ClassDir, id, name)
	if err := atomicfile.Write(path, []byte(content), atomicfile.WithMode(0o644), atomicfile.WithoutSync()); err != nil {
		t.Fatal(err)
	}
}

// RemoveAttr deletes one attribute file of a device.
func RemoveAttr(t testing.TB, root, id, name string) {
	t.Helper()
	if err := os.Remove(filepath.Join(root, device.ClassDir, id, name)); err != nil {
		t.Fatal(err)
	}
}

// RemoveNode deletes the device node /dev/<id> of the tree.
func RemoveNode(t testing.TB, root, id string) {
	t.Helper()
	if err := os.Remove(filepath.Join(root, device.DevDir, id)); err != nil {
		t.Fatal(err)
	}
}

// CreateNode creates the device node /dev/<id> of the tree (a plain file).
func CreateNode(t testing.TB, root, id string) {
	t.Helper()
	write(t, filepath.Join(root, device.DevDir, id), "")
}

// WriteFile writes a file at a host path of the tree (a network table, say),
// creating its directory.
func WriteFile(t testing.TB, root, hostPath, content string) {
	t.Helper()
	path := filepath.Join(root, hostPath)
	mkdir(t, filepath.Dir(path))
	write(t, path, content)
}

func mkdir(t testing.TB, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}

func write(t testing.TB, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

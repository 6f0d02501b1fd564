package devicesim

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/hyperaccel/lpu-node/pkg/device"
)

// MaxDevices bounds Spec.Devices.
const MaxDevices = 1024

// Model is the model attribute Write gives every LPU by default.
const Model = "HyperAccel LPU-sim"

// Files Write adds to every layout (host paths): placeholders of the
// vendor's driver library and tool, so injected mounts have a source.
const (
	LibDir  = "/usr/lib/lpu"
	Library = LibDir + "/libhyperaccel.so"
	Tool    = "/usr/bin/lpu-smi"
)

// Spec describes a simulated node.
type Spec struct {
	Devices       int    // number of LPUs, 1..MaxDevices
	Rings         int    // number of rings; must divide Devices (Devices/Rings LPUs each)
	Major         int64  // major of every /dev/lpuN (xilinx: of /dev/xclmgmt*, pci: of /dev/haN); 0 means device.DefaultMajor (XclmgmtMajor, HAMajor)
	DriverVersion string // /sys/module/lpu/version; "" means "2.1.0-sim"
	Firmware      string // firmware_version of every LPU; "" means "1.8.2-sim"
	Model         string // model of every LPU; "" means Model
	// Backend is the layout to write: device.BackendLPU ("" too),
	// device.BackendXilinx (an Orion node) or device.BackendPCI (a Bertha
	// node). Firmware, when set, is the xilinx cards' shell name; Model
	// applies to lpu only.
	Backend string
	// Faults are states of real hosts to write into cards of an Orion
	// node, by card index (xilinx only; see Fault).
	Faults map[int]Fault
}

// Fault is a state an Orion card can be simulated in.
type Fault string

// The faults Write can put into an Orion card.
const (
	// Unbound: the user function is on the bus but not bound to xocl
	// (probe failure, unbind, late bind): only the PCI core's attributes,
	// no user_pf, no driver link, no render node.
	Unbound Fault = "unbound"
	// HotReset: the card mid hot reset: user_pf kept; ready, drm and
	// the rom subdevice gone, and the render node with them.
	HotReset Fault = "hot-reset"
)

// defaultFirmware is the firmware_version of simulated LPUs.
const defaultFirmware = "1.8.2-sim"

func (spec Spec) validate() (Spec, error) {
	if spec.Devices < 1 || spec.Devices > MaxDevices {
		return spec, fmt.Errorf("simulate: devices %d: want 1 to %d", spec.Devices, MaxDevices)
	}
	if spec.Rings < 1 || spec.Rings > spec.Devices {
		return spec, fmt.Errorf("simulate: rings %d: want 1 to %d (the number of devices)", spec.Rings, spec.Devices)
	}
	if spec.Devices%spec.Rings != 0 {
		return spec, fmt.Errorf("simulate: rings %d does not divide devices %d", spec.Rings, spec.Devices)
	}
	switch spec.Backend {
	case "":
		spec.Backend = device.BackendLPU
	case device.BackendLPU, device.BackendXilinx, device.BackendPCI:
	default:
		return spec, fmt.Errorf("simulate: backend %q: want %s", clip(spec.Backend), strings.Join(device.Backends, ", "))
	}
	if spec.Major == 0 {
		spec.Major = map[string]int64{device.BackendXilinx: XclmgmtMajor, device.BackendPCI: HAMajor}[spec.Backend]
		if spec.Major == 0 {
			spec.Major = device.DefaultMajor
		}
	}
	if err := spec.checkFaults(); err != nil {
		return spec, err
	}
	if spec.Major < 1 || spec.Major > device.MaxMajor {
		return spec, fmt.Errorf("simulate: major %d: want 1 to %d", spec.Major, device.MaxMajor)
	}
	if spec.DriverVersion == "" {
		spec.DriverVersion = "2.1.0-sim"
	}
	if spec.Firmware == "" {
		spec.Firmware = defaultFirmware
	}
	if spec.Model == "" {
		spec.Model = Model
	}
	if !printable(spec.Model) {
		return spec, fmt.Errorf("simulate: model %q: want printable text", clip(spec.Model))
	}
	for field, v := range map[string]string{"driver version": spec.DriverVersion, "firmware": spec.Firmware} {
		if !printable(v) || strings.ContainsAny(v, " \t") {
			return spec, fmt.Errorf("simulate: %s %q: want printable text without spaces", field, clip(v))
		}
	}
	return spec, nil
}

// checkFaults checks that every fault is a known one on a card of an
// Orion node.
func (spec Spec) checkFaults() error {
	for i, f := range spec.Faults {
		if spec.Backend != device.BackendXilinx || i < 0 || i >= spec.Devices || f != Unbound && f != HotReset {
			return fmt.Errorf("simulate: fault %q on card %d: want %s or %s on a card of a xilinx node", clip(string(f)), i, Unbound, HotReset)
		}
	}
	return nil
}

// PCIBusID is the PCI function Write gives the LPU with this index.
func PCIBusID(index int) string {
	return fmt.Sprintf("%04x:%02x:00.0", index/224, 0x10+index%224)
}

// Write writes a simulated node under root with the layout device.Sysfs
// reads: for each LPU a device directory under
// /sys/devices/pciDDDD:00/<bus id>/lpu/ (with dev = "<major>:<index>",
// status READY, serial, firmware_version, model, numa_node (first half of
// the LPUs on node 0, the rest on node 1), ring_id, ring_position,
// telemetry files and a device link to its PCI function), a
// /sys/class/lpu/lpuN link to it, a plain file /dev/lpuN, the driver
// version, the network table device.DefaultNetworkTable describing the
// same rings as the ring attributes, a matching /proc/devices, and
// placeholders for the driver library (Library) and tool (Tool). It writes
// device.TreeMarker, so discovery under root accepts its plain-file
// device nodes.
//
// Write is idempotent: a rerun with the same spec leaves every file with
// the same bytes and rewrites none that is already correct. Each file is
// replaced atomically (temporary file + rename), so two daemons may run it
// at the same time. Live attributes — status and the telemetry files — are
// only created, never overwritten: tests and demos flip statuses, and a
// daemon restart must not reset them. LPUs from an earlier, larger
// simulation (lpuN with N >= spec.Devices) are removed from /sys/class/lpu
// and /dev.
//
// With spec.Backend device.BackendXilinx or device.BackendPCI it writes
// that backend's layout instead (see the package documentation), with the
// same idempotence and live attributes (ready, dev_offline,
// device_bad_state, temperatures, power).
func Write(root string, spec Spec) error {
	spec, err := spec.validate()
	if err != nil {
		return err
	}
	w := writer{root: root}
	w.file(device.TreeMarker, marker, 0o644)
	perRing := spec.Devices / spec.Rings
	switch spec.Backend {
	case device.BackendXilinx:
		writeXilinx(&w, spec)
	case device.BackendPCI:
		writePCI(&w, spec)
	default:
		for i := 0; i < spec.Devices; i++ {
			w.device(spec, i, perRing)
		}
		w.prune(spec.Devices)
		w.file(device.ModuleVersion, spec.DriverVersion+"\n", 0o644)
		w.file(device.DefaultNetworkTable, ringTable(spec.Devices, perRing), 0o644)
	}
	w.file(device.ProcDevices, procDevices(spec), 0o644)
	w.file(Library, libraryPlaceholder, 0o644)
	w.file(Tool, toolScript, 0o755)
	if w.err != nil {
		return fmt.Errorf("simulate under %s: %w", root, w.err)
	}
	return nil
}

// libraryPlaceholder is the content of the simulated driver library.
const libraryPlaceholder = "simulated LPU driver library placeholder, written by lpu-node\n"

// marker is the content of device.TreeMarker: for a reader who finds
// the file.
const marker = "written by lpu-node's simulator: this tree is a simulated LPU node, whose device nodes are plain files\n"

// procDevices is the simulated node's /proc/devices: a few of the
// kernel's own majors, and the simulated drivers' under the names
// discovery checks them against.
func procDevices(spec Spec) string {
	drivers := map[string][]struct {
		major int64
		name  string
	}{
		device.BackendLPU:    {{spec.Major, lpuDriver}},
		device.BackendXilinx: {{spec.Major, xclmgmtDriverName}, {RenderMajor, renderDriverName}},
		device.BackendPCI:    {{spec.Major, pciDriver}},
	}[spec.Backend]
	char := map[int64][]string{1: {"mem"}, 4: {"/dev/vc/0", "tty", "ttyS"}, 5: {"/dev/tty", "/dev/console", "/dev/ptmx"}, 10: {"misc"}}
	for _, d := range drivers {
		char[d.major] = append(char[d.major], d.name)
	}
	majors := make([]int64, 0, len(char))
	for m := range char {
		majors = append(majors, m)
	}
	slices.Sort(majors)
	var b strings.Builder
	b.WriteString("Character devices:\n")
	for _, m := range majors {
		for _, name := range char[m] {
			fmt.Fprintf(&b, "%3d %s\n", m, name)
		}
	}
	b.WriteString("\nBlock devices:\n  7 loop\n  8 sd\n259 blkext\n")
	return b.String()
}

const toolScript = `#!/bin/sh
# Placeholder for the vendor's lpu-smi, written by the simulated LPU node.
echo "lpu-smi (simulated): LPU_VISIBLE_DEVICES=${LPU_VISIBLE_DEVICES:-unset}"
`

// ringTable renders the network table for rings of perRing consecutive LPUs.
func ringTable(devices, perRing int) string {
	var b strings.Builder
	b.WriteString("# LPU network table of the simulated node: one link per line, \"lpuA lpuB\".\n")
	for r := 0; r < devices/perRing; r++ {
		first := r * perRing
		fmt.Fprintf(&b, "# ring %d\n", r)
		switch perRing {
		case 1:
			fmt.Fprintf(&b, "%s\n", device.ID(first))
		case 2:
			fmt.Fprintf(&b, "%s %s\n", device.ID(first), device.ID(first+1))
		default:
			for p := 0; p < perRing; p++ {
				fmt.Fprintf(&b, "%s %s\n", device.ID(first+p), device.ID(first+(p+1)%perRing))
			}
		}
	}
	return b.String()
}

func (w *writer) device(spec Spec, i, perRing int) {
	id := device.ID(i)
	bus := PCIBusID(i)
	pci := fmt.Sprintf("/sys/devices/pci%s:00/%s", bus[:4], bus)
	dir := pci + "/lpu/" + id
	numa := 0
	if spec.Devices > 1 && i >= spec.Devices/2 {
		numa = 1
	}
	w.mkdir(pci)
	w.file(pci+"/numa_node", strconv.Itoa(numa)+"\n", 0o644)
	static := []struct{ name, value string }{
		{attrDev, fmt.Sprintf("%d:%d", spec.Major, i)},
		{attrSerial, fmt.Sprintf("LPUSIM%06d", i)},
		{attrFirmware, spec.Firmware},
		{attrModel, spec.Model},
		{attrNUMA, strconv.Itoa(numa)},
		{attrRingID, strconv.Itoa(i / perRing)},
		{attrRingPos, strconv.Itoa(i % perRing)},
		{device.AttrMemoryTotal, strconv.FormatUint(32<<30, 10)},
	}
	live := []struct{ name, value string }{
		{attrStatus, device.StatusReady},
		{device.AttrUtilization, "0"},
		{device.AttrMemoryUsed, strconv.FormatUint(256<<20, 10)},
		{device.AttrTemperature, strconv.Itoa(38000 + (i%4)*500)},
		{device.AttrPower, strconv.Itoa(28000000 + (i%3)*1000000)},
	}
	for _, a := range static {
		w.file(dir+"/"+a.name, a.value+"\n", 0o644)
	}
	for _, a := range live {
		w.create(dir+"/"+a.name, a.value+"\n", 0o644)
	}
	w.symlink("../../../"+bus, dir+"/"+attrDeviceLink)
	w.symlink("../../devices/pci"+bus[:4]+":00/"+bus+"/lpu/"+id, device.ClassDir+"/"+id)
	w.create(device.DevDir+"/"+id, "", 0o666)
}

// prune removes class links and device nodes of LPUs at or above n.
func (w *writer) prune(n int) {
	for _, dir := range []string{device.ClassDir, device.DevDir} {
		entries, err := os.ReadDir(filepath.Join(w.root, dir))
		if err != nil {
			w.fail(err)
			return
		}
		for _, e := range entries {
			if idx, err := device.ParseID(e.Name()); err == nil && idx >= n {
				if err := os.Remove(filepath.Join(w.root, dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
					w.fail(err)
				}
			}
		}
	}
}

package device

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/hyperaccel/lpu-node/internal/atomicfile"
)

// MaxSimDevices bounds SimSpec.Devices.
const MaxSimDevices = 1024

// SimModel is the model attribute Simulate writes by default.
const SimModel = "HyperAccel LPU-sim"

// Files Simulate writes besides the sysfs and devfs layout (host paths).
const (
	SimLibDir  = "/usr/lib/lpu"
	SimLibrary = SimLibDir + "/libhyperaccel.so"
	SimTool    = "/usr/bin/lpu-smi"
)

// SimSpec describes a simulated node.
type SimSpec struct {
	Devices       int    // number of LPUs, 1..MaxSimDevices
	Rings         int    // number of rings; must divide Devices (Devices/Rings LPUs each)
	Major         int64  // major of every /dev/lpuN (xilinx: of /dev/xclmgmt*, pci: of /dev/haN); 0 means DefaultMajor (SimXclmgmtMajor, SimHAMajor)
	DriverVersion string // /sys/module/lpu/version; "" means "2.1.0-sim"
	Firmware      string // firmware_version of every LPU; "" means "1.8.2-sim"
	Model         string // model of every LPU; "" means SimModel
	// Backend is the layout to write: BackendLPU ("" too), BackendXilinx
	// (an Orion node) or BackendPCI (a Bertha node). Firmware, when set,
	// is the xilinx cards' shell name; Model applies to lpu only.
	Backend string
	// Faults are states of real hosts to write into cards of an Orion
	// node, by card index (xilinx only; see SimFault).
	Faults map[int]SimFault
}

// SimFault is a state an Orion card can be simulated in.
type SimFault string

// The faults Simulate can write into an Orion card.
const (
	// SimUnbound: the user function is on the bus but not bound to xocl
	// (probe failure, unbind, late bind): only the PCI core's attributes,
	// no user_pf, no driver link, no render node.
	SimUnbound SimFault = "unbound"
	// SimHotReset: the card mid hot reset: user_pf kept; ready, drm and
	// the rom subdevice gone, and the render node with them.
	SimHotReset SimFault = "hot-reset"
)

// simDefaultFirmware is the firmware_version of simulated LPUs.
const simDefaultFirmware = "1.8.2-sim"

func (spec SimSpec) validate() (SimSpec, error) {
	if spec.Devices < 1 || spec.Devices > MaxSimDevices {
		return spec, fmt.Errorf("simulate: devices %d: want 1 to %d", spec.Devices, MaxSimDevices)
	}
	if spec.Rings < 1 || spec.Rings > spec.Devices {
		return spec, fmt.Errorf("simulate: rings %d: want 1 to %d (the number of devices)", spec.Rings, spec.Devices)
	}
	if spec.Devices%spec.Rings != 0 {
		return spec, fmt.Errorf("simulate: rings %d does not divide devices %d", spec.Rings, spec.Devices)
	}
	switch spec.Backend {
	case "":
		spec.Backend = BackendLPU
	case BackendLPU, BackendXilinx, BackendPCI:
	default:
		return spec, fmt.Errorf("simulate: backend %q: want %s", clip(spec.Backend), strings.Join(Backends, ", "))
	}
	if spec.Major == 0 {
		spec.Major = map[string]int64{BackendXilinx: SimXclmgmtMajor, BackendPCI: SimHAMajor}[spec.Backend]
		if spec.Major == 0 {
			spec.Major = DefaultMajor
		}
	}
	if err := spec.checkFaults(); err != nil {
		return spec, err
	}
	if spec.Major < 1 || spec.Major > MaxMajor {
		return spec, fmt.Errorf("simulate: major %d: want 1 to %d", spec.Major, MaxMajor)
	}
	if spec.DriverVersion == "" {
		spec.DriverVersion = "2.1.0-sim"
	}
	if spec.Firmware == "" {
		spec.Firmware = simDefaultFirmware
	}
	if spec.Model == "" {
		spec.Model = SimModel
	}
	if cleanText(spec.Model) != spec.Model {
		return spec, fmt.Errorf("simulate: model %q: want printable text", clip(spec.Model))
	}
	for field, v := range map[string]string{"driver version": spec.DriverVersion, "firmware": spec.Firmware} {
		if cleanText(v) != v || strings.ContainsAny(v, " \t") {
			return spec, fmt.Errorf("simulate: %s %q: want printable text without spaces", field, clip(v))
		}
	}
	return spec, nil
}

// checkFaults checks that every fault is a known one on a card of an
// Orion node.
func (spec SimSpec) checkFaults() error {
	for i, f := range spec.Faults {
		if spec.Backend != BackendXilinx || i < 0 || i >= spec.Devices || f != SimUnbound && f != SimHotReset {
			return fmt.Errorf("simulate: fault %q on card %d: want %s or %s on a card of a xilinx node", clip(string(f)), i, SimUnbound, SimHotReset)
		}
	}
	return nil
}

// SimulatedRoot is the discovery root of the simulated node a daemon run
// with --simulate uses: <stateDir>/simulated-node.
func SimulatedRoot(stateDir string) string { return filepath.Join(stateDir, "simulated-node") }

// SimPCIBusID is the PCI function Simulate gives the LPU with this index.
func SimPCIBusID(index int) string {
	return fmt.Sprintf("%04x:%02x:00.0", index/224, 0x10+index%224)
}

// Simulate writes a simulated node under root with the layout Sysfs reads:
// for each LPU a device directory under /sys/devices/pciDDDD:00/<bus id>/lpu/
// (with dev = "<major>:<index>", status READY, serial, firmware_version, model,
// numa_node (first half of the LPUs on node 0, the rest on node 1), ring_id,
// ring_position, telemetry files and a device link to its PCI function), a
// /sys/class/lpu/lpuN link to it, a plain file /dev/lpuN, the driver version,
// the network table DefaultNetworkTable describing the same rings as the
// ring attributes, and placeholders for the driver library (SimLibrary) and
// tool (SimTool).
//
// Simulate is idempotent: a rerun with the same spec leaves every file with
// the same bytes and rewrites none that is already correct. Each file is
// replaced atomically (temporary file + rename), so two daemons may run it
// at the same time. Live attributes — status and the telemetry files — are
// only created, never overwritten: tests and demos flip statuses, and a
// daemon restart must not reset them. LPUs from an earlier, larger
// simulation (lpuN with N >= spec.Devices) are removed from /sys/class/lpu
// and /dev.
//
// With spec.Backend BackendXilinx or BackendPCI it writes that backend's
// layout instead (see simulateXilinx and simulatePCI in the package
// documentation, "Simulated node"), with the same idempotence and live
// attributes (ready, dev_offline, device_bad_state, temperatures, power).
func Simulate(root string, spec SimSpec) error {
	spec, err := spec.validate()
	if err != nil {
		return err
	}
	MarkSimulated(root)
	w := simWriter{root: root}
	perRing := spec.Devices / spec.Rings
	switch spec.Backend {
	case BackendXilinx:
		simulateXilinx(&w, spec)
	case BackendPCI:
		simulatePCI(&w, spec)
	default:
		for i := 0; i < spec.Devices; i++ {
			w.device(spec, i, perRing)
		}
		w.prune(spec.Devices)
		w.file(ModuleVersion, spec.DriverVersion+"\n", 0o644)
		w.file(DefaultNetworkTable, simTable(spec.Devices, perRing), 0o644)
	}
	w.file(ProcDevices, simProcDevices(spec), 0o644)
	w.file(SimLibrary, "simulated LPU driver library placeholder, written by lpu-node\n", 0o644)
	w.file(SimTool, simTool, 0o755)
	if w.err != nil {
		return fmt.Errorf("simulate under %s: %w", root, w.err)
	}
	return nil
}

// simProcDevices is the simulated node's /proc/devices: a few of the
// kernel's own majors, and the simulated drivers' under the names
// discovery checks them against.
func simProcDevices(spec SimSpec) string {
	drivers := map[string][]struct {
		major int64
		name  string
	}{
		BackendLPU:    {{spec.Major, lpuDriver}},
		BackendXilinx: {{spec.Major, xclmgmtDriverName}, {SimRenderMajor, renderDriverName}},
		BackendPCI:    {{spec.Major, simPCIDriver}},
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

const simTool = `#!/bin/sh
# Placeholder for the vendor's lpu-smi, written by the simulated LPU node.
echo "lpu-smi (simulated): LPU_VISIBLE_DEVICES=${LPU_VISIBLE_DEVICES:-unset}"
`

// simTable renders the network table for rings of perRing consecutive LPUs.
func simTable(devices, perRing int) string {
	var b strings.Builder
	b.WriteString("# LPU network table of the simulated node: one link per line, \"lpuA lpuB\".\n")
	for r := 0; r < devices/perRing; r++ {
		first := r * perRing
		fmt.Fprintf(&b, "# ring %d\n", r)
		switch perRing {
		case 1:
			fmt.Fprintf(&b, "%s\n", ID(first))
		case 2:
			fmt.Fprintf(&b, "%s %s\n", ID(first), ID(first+1))
		default:
			for p := 0; p < perRing; p++ {
				fmt.Fprintf(&b, "%s %s\n", ID(first+p), ID(first+(p+1)%perRing))
			}
		}
	}
	return b.String()
}

// simWriter writes files under root, keeping the first error.
type simWriter struct {
	root string
	err  error
}

func (w *simWriter) device(spec SimSpec, i, perRing int) {
	id := ID(i)
	bus := SimPCIBusID(i)
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
		{AttrMemoryTotal, strconv.FormatUint(32<<30, 10)},
	}
	live := []struct{ name, value string }{
		{attrStatus, StatusReady},
		{AttrUtilization, "0"},
		{AttrMemoryUsed, strconv.FormatUint(256<<20, 10)},
		{AttrTemperature, strconv.Itoa(38000 + (i%4)*500)},
		{AttrPower, strconv.Itoa(28000000 + (i%3)*1000000)},
	}
	for _, a := range static {
		w.file(dir+"/"+a.name, a.value+"\n", 0o644)
	}
	for _, a := range live {
		w.create(dir+"/"+a.name, a.value+"\n", 0o644)
	}
	w.symlink("../../../"+bus, dir+"/"+attrDeviceLink)
	w.symlink("../../devices/pci"+bus[:4]+":00/"+bus+"/lpu/"+id, ClassDir+"/"+id)
	w.create(DevDir+"/"+id, "", 0o666)
}

// prune removes class links and device nodes of LPUs at or above n.
func (w *simWriter) prune(n int) {
	for _, dir := range []string{ClassDir, DevDir} {
		entries, err := os.ReadDir(filepath.Join(w.root, dir))
		if err != nil {
			w.fail(err)
			return
		}
		for _, e := range entries {
			if idx, err := ParseID(e.Name()); err == nil && idx >= n {
				if err := os.Remove(filepath.Join(w.root, dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
					w.fail(err)
				}
			}
		}
	}
}

func (w *simWriter) fail(err error) {
	if w.err == nil {
		w.err = err
	}
}

func (w *simWriter) mkdir(hostDir string) {
	if w.err == nil {
		w.fail(os.MkdirAll(filepath.Join(w.root, hostDir), 0o755))
	}
}

// tmpSeq makes temporary names unique within the process; the pid makes
// them unique between processes.
var tmpSeq atomic.Uint64

func tmpName(path string) string {
	return filepath.Join(filepath.Dir(path),
		fmt.Sprintf(".%s.%d.%d.tmp", filepath.Base(path), os.Getpid(), tmpSeq.Add(1)))
}

// writeTemp writes content to a new temporary file next to path and returns
// its name.
func writeTemp(path, content string, perm fs.FileMode) (string, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", err
	}
	tmp := tmpName(path)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return "", err
	}
	_, err = f.WriteString(content)
	if err == nil {
		err = f.Chmod(perm) // umask-proof
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return "", err
	}
	return tmp, nil
}

// file makes hostPath hold exactly content with mode perm, replacing it
// atomically unless it already does.
func (w *simWriter) file(hostPath, content string, perm fs.FileMode) {
	if w.err != nil {
		return
	}
	path := filepath.Join(w.root, hostPath)
	if fi, err := os.Lstat(path); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm() == perm {
		if old, err := readBounded(path, int64(len(content))); err == nil && bytes.Equal(old, []byte(content)) {
			return
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		w.fail(err)
		return
	}
	if err := atomicfile.Write(path, []byte(content), atomicfile.WithMode(perm), atomicfile.WithoutSync()); err != nil {
		w.fail(err)
	}
}

// create makes hostPath with content unless something already exists there;
// the file appears atomically (hard link of a complete temporary file).
func (w *simWriter) create(hostPath, content string, perm fs.FileMode) {
	if w.err != nil {
		return
	}
	path := filepath.Join(w.root, hostPath)
	if _, err := os.Lstat(path); err == nil {
		return
	}
	tmp, err := writeTemp(path, content, perm)
	if err != nil {
		w.fail(err)
		return
	}
	defer os.Remove(tmp)
	if err := os.Link(tmp, path); err != nil && !errors.Is(err, fs.ErrExist) {
		w.fail(err)
	}
}

// symlink makes hostPath a symbolic link to target, atomically.
func (w *simWriter) symlink(target, hostPath string) {
	if w.err != nil {
		return
	}
	path := filepath.Join(w.root, hostPath)
	if old, err := os.Readlink(path); err == nil && old == target {
		return
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		w.fail(err)
		return
	}
	if err := atomicfile.Symlink(target, path, atomicfile.WithoutSync()); err != nil {
		w.fail(err)
	}
}

package devicesim

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/hyperaccel/lpu-node/pkg/device"
)

// Device numbers of the simulated PCI layouts: DRM's render major, and the
// majors the kernel would hand xclmgmt and the Bertha driver dynamically.
const (
	RenderMajor  = 226
	XclmgmtMajor = 235
	HAMajor      = 236
)

// pciClassDir is the class directory the simulated Bertha functions
// hold their node's directory in (the real name is not public).
const pciClassDir = "ha"

// pciDriver is the driver the simulated Bertha functions are bound to,
// and the name of its major in /proc/devices.
const pciDriver = "ha"

// PCI classes of the simulated U55C functions: processing accelerators
// (0x1200), management and user programming interfaces.
const (
	u55cMgmtClass = "0x120000"
	u55cUserClass = "0x120001"
)

// xilinxBuses are the bus numbers of the first eight simulated Orion
// cards: pairs under four root ports, not contiguous, as on a real host.
var xilinxBuses = [...]int{0x17, 0x18, 0x31, 0x32, 0xb1, 0xb2, 0xca, 0xcb}

// XilinxAddress is the address of the user function (function 1) of the
// simulated Orion card with this index; its management function is the
// same address with function 0.
func XilinxAddress(index int) string {
	return fmt.Sprintf("%04x:%02x:00.1", index/len(xilinxBuses), xilinxBuses[index%len(xilinxBuses)])
}

// PCIAddress is the address of the simulated Bertha function with this
// index.
func PCIAddress(index int) string {
	return fmt.Sprintf("%04x:%02x:00.0", index/200, 0x3b+index%200)
}

// xclmgmtInstance is XRT's instance number of a management function:
// domain<<16 | bus<<8 | devfn, in decimal in /dev/xclmgmt<instance>.
func xclmgmtInstance(addr string) int {
	dom, _ := strconv.ParseUint(addr[0:4], 16, 16)
	bus, _ := strconv.ParseUint(addr[5:7], 16, 8)
	dev, _ := strconv.ParseUint(addr[8:10], 16, 8)
	fn, _ := strconv.ParseUint(addr[11:12], 16, 8)
	return int(dom<<16 | bus<<8 | dev<<3 | fn)
}

// ringOrder is the order of perRing cards around a simulated Orion
// ring: the even positions up, then the odd ones down (0 2 4 6 7 5 3 1),
// cabling that does not follow address order.
func ringOrder(perRing int) []int {
	var order []int
	for p := 0; p < perRing; p += 2 {
		order = append(order, p)
	}
	for p := perRing - 1; p > 0; p-- {
		if p%2 == 1 {
			order = append(order, p)
		}
	}
	return order
}

// writeXilinx writes an Orion node: spec.Devices Alveo U55C cards under
// /sys/bus/pci/devices (management function .0 with mgmt_pf, instance and
// xrt_mgmt/xclmgmt<instance>/dev; user function .1 with user_pf, ready,
// dev_offline, device_bad_state, board_name, logic_uuids, numa_node,
// rom.u.<n>/VBNV and timestamp, xmc.u.<n> serial, temperature and power,
// hwmon, drm/renderD<128+i>/dev and drm/card<i+1>, driver links; classes
// 0x120000 and 0x120001), plain files for /dev/dri/renderD* and
// /dev/xclmgmt*, the xocl version, a matching /proc/devices, a network
// table at device.DefaultNetworkTable keyed by PCI addresses (mixing user and
// management functions) whose rings do not follow address order, and the
// distractors of a real host: another vendor's device, a Xilinx
// management-only function of another model, a plain rom file beside
// rom.u.*, and the BMC's VGA holding DRM's card0. spec.Faults turn cards
// into unbound or hot-reset ones (Fault); a rerun without them
// restores the cards.
func writeXilinx(w *writer, spec Spec) {
	for i := 0; i < spec.Devices; i++ {
		w.xilinxCard(spec, i)
		switch spec.Faults[i] {
		case Unbound:
			w.unbindUser(i)
		case HotReset:
			w.hotReset(i)
		}
	}
	// Distractors, and the BMC's VGA, which takes DRM's card0.
	w.pciFunction("0000:00:1f.3", "0x8086", "0xa348", "0x040300", "snd_hda_intel", 0)
	w.pciFunction(bmcVGA, "0x1a03", "0x2000", "0x030000", "ast", 0)
	w.file(pciDevDir(bmcVGA)+"/drm/card0/"+attrDev, fmt.Sprintf("%d:0\n", RenderMajor), 0o644)
	w.pciFunction("0000:5e:00.0", device.DefaultXilinxVendor, "0x5004", "0x058000", "xclmgmt", 0)
	w.file(pciDevDir("0000:5e:00.0")+"/"+fileMgmtPF, "", 0o644)
	w.pruneXilinx(spec.Devices)
	w.file(device.XoclVersion, "2.15.225,adf27adb3cfadc6e4c41d6db814159f1329b24f3\n", 0o644)
	w.file("/sys/module/xclmgmt/version", "2.15.225,adf27adb3cfadc6e4c41d6db814159f1329b24f3\n", 0o644)
	w.file(device.DefaultNetworkTable, xilinxTable(spec), 0o644)
}

// bmcVGA is the simulated BMC's VGA function (ASPEED), whose DRM
// driver takes card0 before xocl registers any card.
const bmcVGA = "0000:03:00.0"

// unbindUser turns a simulated user function into one xocl is not bound
// to: only the PCI core's attributes stay.
func (w *writer) unbindUser(i int) {
	if w.err != nil {
		return
	}
	user := XilinxAddress(i)
	dir := pciDevDir(user)
	entries, err := os.ReadDir(filepath.Join(w.root, dir))
	if err != nil {
		w.fail(err)
		return
	}
	for _, e := range entries {
		switch e.Name() {
		case "vendor", "device", "class", "subsystem_vendor", "subsystem_device", attrNUMA:
		default:
			w.fail(os.RemoveAll(filepath.Join(w.root, dir, e.Name())))
		}
	}
	w.remove("/sys/bus/pci/drivers/" + xoclDriver + "/" + user)
	w.remove(fmt.Sprintf("%s/%s%d", device.DRIDir, renderPrefix, 128+i))
}

// hotReset puts a simulated user function mid hot reset: user_pf stays,
// ready, drm and rom.u.* go, and the render node with them.
func (w *writer) hotReset(i int) {
	w.remove(fmt.Sprintf("%s/%s%d", device.DRIDir, renderPrefix, 128+i))
	dir := filepath.Join(w.root, pciDevDir(XilinxAddress(i)))
	rom, _ := filepath.Glob(filepath.Join(dir, subROM+".u.*"))
	for _, p := range append(rom, filepath.Join(dir, fileReady), filepath.Join(dir, "drm")) {
		w.fail(os.RemoveAll(p))
	}
}

// pciDevDir is the real directory of a simulated PCI function.
func pciDevDir(addr string) string {
	return "/sys/devices/pci" + addr[:4] + ":" + addr[5:7] + "/" + addr
}

// pciFunction writes one PCI function with its vendor, device, class,
// subsystem IDs, numa_node and driver link, and its /sys/bus/pci/devices
// link. Every real function has subsystem_vendor and subsystem_device, and
// Node Feature Discovery skips a function without them; the simulated
// ones repeat vendor and device (a board without an OEM subsystem ID).
func (w *writer) pciFunction(addr, vendor, devID, class, driver string, numa int) {
	dir := pciDevDir(addr)
	w.mkdir(dir)
	w.file(dir+"/vendor", vendor+"\n", 0o644)
	w.file(dir+"/device", devID+"\n", 0o644)
	w.file(dir+"/class", class+"\n", 0o644)
	w.file(dir+"/subsystem_vendor", vendor+"\n", 0o644)
	w.file(dir+"/subsystem_device", devID+"\n", 0o644)
	w.file(dir+"/"+attrNUMA, strconv.Itoa(numa)+"\n", 0o644)
	w.mkdir("/sys/bus/pci/drivers/" + driver)
	w.symlink("../../../bus/pci/drivers/"+driver, dir+"/driver")
	w.symlink("../../../devices/pci"+addr[:4]+":"+addr[5:7]+"/"+addr, device.PCIDevicesDir+"/"+addr)
	w.symlink("../../../../devices/pci"+addr[:4]+":"+addr[5:7]+"/"+addr, "/sys/bus/pci/drivers/"+driver+"/"+addr)
}

func (w *writer) xilinxCard(spec Spec, i int) {
	user := XilinxAddress(i)
	mgmt := cardKey(user) + ".0"
	numa := 0
	if spec.Devices > 1 && i >= spec.Devices/2 {
		numa = 1
	}
	inst := xclmgmtInstance(mgmt)
	w.pciFunction(mgmt, device.DefaultXilinxVendor, device.DefaultXilinxMgmtDevice, u55cMgmtClass, "xclmgmt", numa)
	m := pciDevDir(mgmt)
	w.file(m+"/"+fileMgmtPF, "", 0o644)
	w.file(m+"/"+fileInstance, strconv.Itoa(inst)+"\n", 0o644)
	w.file(fmt.Sprintf("%s/xrt_mgmt/%s%d/dev", m, xclmgmtNode, inst), fmt.Sprintf("%d:%d\n", spec.Major, i), 0o644)

	w.pciFunction(user, device.DefaultXilinxVendor, device.DefaultXilinxUserDevice, u55cUserClass, xoclDriver, numa)
	u := pciDevDir(user)
	uinst := xclmgmtInstance(user)
	w.file(u+"/"+fileUserPF, "", 0o644)
	w.file(u+"/"+fileBoardName, "u55c\n", 0o644)
	w.file(u+"/logic_uuids", fmt.Sprintf("%032x\n", 0x5eed0000+i), 0o644)
	rom := fmt.Sprintf("%s/%s.u.%d", u, subROM, uinst)
	w.file(u+"/"+subROM, "distractor: a plain file named like the rom subdevice\n", 0o644)
	w.file(rom+"/"+fileVBNV, spec.shell()+"\n", 0o644)
	w.file(rom+"/timestamp", "0\n", 0o644)
	xmc := fmt.Sprintf("%s/%s.u.%d", u, subXMC, uinst+0x100000)
	w.file(xmc+"/"+fileSerialNum, fmt.Sprintf("XFL1SIM%05d\n", i), 0o644)
	render := fmt.Sprintf("%s%d", renderPrefix, 128+i)
	w.file(u+"/drm/"+render+"/"+attrDev, fmt.Sprintf("%d:%d\n", RenderMajor, 128+i), 0o644)
	// DRM numbers cards and render nodes independently; the BMC's VGA
	// holds card0, so card<K> is not renderD<N>-128.
	w.file(u+"/drm/card"+strconv.Itoa(i+1)+"/"+attrDev, fmt.Sprintf("%d:%d\n", RenderMajor, i+1), 0o644)
	for _, a := range []struct{ path, value string }{
		{u + "/" + fileReady, "0x1"},
		{m + "/" + fileReady, "1"}, // xclmgmt prints %d, xocl 0x%llx
		{u + "/" + fileDevOffline, "0"},
		{u + "/" + fileBadState, "0"},
		{xmc + "/" + fileXMCTemp, strconv.Itoa(41 + i%4)},
		{xmc + "/" + fileXMCPower, strconv.Itoa(21000000 + (i%3)*1500000)},
		{fmt.Sprintf("%s/%s/%s%d/%s", u, hwmonDir, hwmonDir, 3+i, fileHwmonTemp), strconv.Itoa((41 + i%4) * 1000)},
	} {
		w.create(a.path, a.value+"\n", 0o644)
	}
	w.create(device.DRIDir+"/"+render, "", 0o666)
	w.create(fmt.Sprintf("%s/%s%d", device.DevDir, xclmgmtNode, inst), "", 0o666)
}

// spec.shell is the VBNV the simulated cards carry.
func (spec Spec) shell() string {
	if spec.Firmware != "" && spec.Firmware != defaultFirmware {
		return spec.Firmware
	}
	return device.DefaultXilinxShell
}

// xilinxTable renders the Orion network table: one link per line
// between two cards, named by PCI address, the first by its user function
// and the second by its management function (either names the card).
func xilinxTable(spec Spec) string {
	var b strings.Builder
	b.WriteString("# LPU network table of the simulated Orion node: one link per line between two cards,\n")
	b.WriteString("# each named by the PCI address of either of its functions.\n")
	per := spec.Devices / spec.Rings
	for r := 0; r < spec.Rings; r++ {
		var ring []string
		for _, p := range ringOrder(per) {
			ring = append(ring, device.ID(r*per+p))
		}
		fmt.Fprintf(&b, "# ring %d\n", r)
		addr := func(id string, mgmt bool) string {
			idx, _ := device.ParseID(id)
			a := XilinxAddress(idx)
			if mgmt {
				a = cardKey(a) + ".0"
			}
			return a
		}
		switch len(ring) {
		case 1:
			fmt.Fprintf(&b, "%s\n", addr(ring[0], false))
		case 2:
			fmt.Fprintf(&b, "%s %s\n", addr(ring[0], false), addr(ring[1], true))
		default:
			for p := range ring {
				fmt.Fprintf(&b, "%s %s\n", addr(ring[p], false), addr(ring[(p+1)%len(ring)], true))
			}
		}
	}
	return b.String()
}

// pruneXilinx removes the cards and nodes of an earlier, larger Orion
// simulation (indexes >= n).
func (w *writer) pruneXilinx(n int) {
	keep := map[string]bool{}
	for i := 0; i < n; i++ {
		keep[cardKey(XilinxAddress(i))] = true
	}
	w.prunePCI(func(addr string) bool {
		return addr[8:] == "00.0" || addr[8:] == "00.1"
	}, func(addr string) bool {
		return keep[cardKey(addr)] || addr == "0000:5e:00.0" || addr == bmcVGA
	}, func(name string) bool {
		if rest, ok := strings.CutPrefix(name, renderPrefix); ok {
			m, err := strconv.Atoi(rest)
			return err == nil && m >= 128+n
		}
		if rest, ok := strings.CutPrefix(name, xclmgmtNode); ok {
			inst, err := strconv.Atoi(rest)
			if err != nil {
				return false
			}
			for i := 0; i < n; i++ {
				if xclmgmtInstance(cardKey(XilinxAddress(i))+".0") == inst {
					return false
				}
			}
			return true
		}
		return false
	})
}

// prunePCI removes simulated functions that ours says belong to the
// simulation and keep says are no longer wanted, and device nodes stale
// says are gone.
func (w *writer) prunePCI(ours, keep func(addr string) bool, stale func(node string) bool) {
	if w.err != nil {
		return
	}
	entries, err := os.ReadDir(filepath.Join(w.root, device.PCIDevicesDir))
	if err != nil {
		w.fail(err)
		return
	}
	for _, e := range entries {
		if a := e.Name(); isPCIAddress(a) && ours(a) && !keep(a) && a != "0000:00:1f.3" {
			w.remove(device.PCIDevicesDir + "/" + a)
		}
	}
	for _, dir := range []string{device.DevDir, device.DRIDir} {
		entries, err := os.ReadDir(filepath.Join(w.root, dir))
		if err != nil {
			continue
		}
		for _, e := range entries {
			if !e.IsDir() && stale(e.Name()) {
				w.remove(dir + "/" + e.Name())
			}
		}
	}
}

// writePCI writes a Bertha node: spec.Devices functions of vendor
// 0x1eff, class 0x120000 under /sys/bus/pci/devices, each with its node at
// <function>/ha/haK/dev where K follows probe order, which is not bus
// order (here the reverse), plain files /dev/haK, the driver version, a
// network table of lpuN IDs at device.DefaultNetworkTable, and distractors:
// another vendor's device and a function of the same vendor with another
// class.
func writePCI(w *writer, spec Spec) {
	for i := 0; i < spec.Devices; i++ {
		addr := PCIAddress(i)
		numa := 0
		if spec.Devices > 1 && i >= spec.Devices/2 {
			numa = 1
		}
		k := spec.Devices - 1 - i // probe order
		w.pciFunction(addr, device.DefaultPCIVendor, "0x0b00", device.DefaultPCIClass, pciDriver, numa)
		name := fmt.Sprintf("ha%d", k)
		w.file(fmt.Sprintf("%s/%s/%s/%s", pciDevDir(addr), pciClassDir, name, attrDev), fmt.Sprintf("%d:%d\n", spec.Major, k), 0o644)
		w.create(device.DevDir+"/"+name, "", 0o666)
		w.keepOnly(pciDevDir(addr)+"/"+pciClassDir, name) // a rerun with another count renumbers
	}
	w.pciFunction("0000:00:1f.3", "0x8086", "0xa348", "0x040300", "snd_hda_intel", 0)
	w.pciFunction("0000:3a:00.0", device.DefaultPCIVendor, "0x0b01", "0x058000", "ha", 0)
	w.prunePCI(func(addr string) bool {
		return addr[8:] == "00.0" && addr != "0000:3a:00.0"
	}, func(addr string) bool {
		for i := 0; i < spec.Devices; i++ {
			if PCIAddress(i) == addr {
				return true
			}
		}
		return false
	}, func(name string) bool {
		rest, ok := strings.CutPrefix(name, "ha")
		k, err := strconv.Atoi(rest)
		return ok && err == nil && k >= spec.Devices
	})
	w.file("/sys/module/ha/version", spec.DriverVersion+"\n", 0o644)
	for _, f := range device.PCIDriverFiles {
		w.file(f, "simulated Bertha user-mode driver placeholder, written by lpu-node\n", 0o644)
	}
	w.file(device.DefaultNetworkTable, ringTable(spec.Devices, spec.Devices/spec.Rings), 0o644)
}

package device

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Names the xilinx backend reads in a card's PCI function directories.
const (
	xoclDriver      = "xocl"
	xclmgmtNode     = "xclmgmt"
	fileUserPF      = "user_pf"
	fileMgmtPF      = "mgmt_pf"
	fileReady       = "ready"
	fileDevOffline  = "dev_offline"
	fileBadState    = "device_bad_state"
	fileBoardName   = "board_name"
	fileInstance    = "instance"
	fileVBNV        = "VBNV"
	fileSerialNum   = "serial_num"
	fileXMCTemp     = "xmc_fpga_temp"
	fileXMCPower    = "xmc_power"
	fileHwmonTemp   = "temp4_input"
	subROM          = "rom"
	subXMC          = "xmc"
	renderPrefix    = "renderD"
	hwmonDir        = "hwmon"
	u55cMemoryBytes = 16 << 30
)

// mgmtClassDirs are the class directories, under the management function,
// that hold xclmgmt<instance>: "xrt_mgmt" in current XRT, "xclmgmt" in old
// releases.
var mgmtClassDirs = []string{"xrt_mgmt", "xclmgmt"}

// xilinxCards scans the bus for the configured user and management
// functions and pairs them by card address. IDs: cards with a user
// function first, by its address (the order hyperdex-smi and XRT number
// them), then cards with only a management function (no shell flashed),
// by address, so flashing one never renumbers the others.
func (s *Sysfs) xilinxCards() ([]card, error) {
	o := s.disc.Xilinx
	fns, err := s.scanPCI(o.Vendor, "")
	if err != nil {
		return nil, err
	}
	byKey := map[string]*card{}
	var keys []string
	for _, f := range fns {
		var role *string
		c := byKey[cardKey(f.addr)]
		if c == nil {
			c = &card{}
		}
		switch {
		case f.device == o.UserDevice && s.exists(hostFn(f.addr, fileUserPF)):
			role = &c.user
		case f.device == o.MgmtDevice && s.exists(hostFn(f.addr, fileMgmtPF)):
			role = &c.mgmt
		default:
			continue // another Xilinx function (another card model, a DMA function)
		}
		if *role != "" {
			s.warn("ignoring second PCI function of one role on a card", "address", f.addr, "kept", *role)
			continue
		}
		*role = f.addr
		if byKey[cardKey(f.addr)] == nil {
			byKey[cardKey(f.addr)] = c
			keys = append(keys, cardKey(f.addr))
		}
	}
	cards := make([]card, 0, len(keys))
	for _, k := range keys {
		cards = append(cards, *byKey[k])
	}
	slices.SortStableFunc(cards, func(a, b card) int {
		if (a.user == "") != (b.user == "") {
			if a.user == "" {
				return 1
			}
			return -1
		}
		return strings.Compare(a.primary(), b.primary())
	})
	for i := range cards {
		cards[i].index = i
		cards[i].id = ID(i)
	}
	s.instanceConflicts(cards)
	return cards, nil
}

// instanceConflicts marks cards whose management functions claim one
// instance number: their /dev/xclmgmt<instance> would be one node.
func (s *Sysfs) instanceConflicts(cards []card) {
	if s.disc.Xilinx.NoManagementNodes {
		return
	}
	claimed := map[int64][]int{}
	for i, c := range cards {
		if c.mgmt == "" {
			continue
		}
		if inst, err := s.instance(c.mgmt); err == nil {
			claimed[inst] = append(claimed[inst], i)
		}
	}
	for inst, idx := range claimed {
		if len(idx) < 2 {
			continue
		}
		for _, i := range idx {
			var others []string
			for _, j := range idx {
				if j != i {
					others = append(others, cards[j].mgmt)
				}
			}
			cards[i].conflict = fmt.Sprintf("instance %d in %s also claimed by %s", inst, hostFn(cards[i].mgmt, fileInstance), strings.Join(others, ", "))
		}
	}
}

// instance reads a management function's instance number.
func (s *Sysfs) instance(mgmt string) (int64, error) {
	host := hostFn(mgmt, fileInstance)
	v, err := readAttr(s.under(host))
	if err != nil {
		return 0, errors.New(describeErr("read", host, err))
	}
	n, err := parseDecimal(v, 1<<32-1)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", host, err)
	}
	return n, nil
}

// discoverXilinx is Discover of the xilinx backend, without the topology.
func (s *Sysfs) discoverXilinx(ctx context.Context) (*Inventory, error) {
	cards, err := s.xilinxCards()
	if err != nil {
		return nil, err
	}
	idx := &cardIndex{byID: make(map[string]card, len(cards))}
	inv := &Inventory{Devices: make([]Device, 0, len(cards))}
	for _, c := range cards {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		idx.byID[c.id] = c
		inv.Devices = append(inv.Devices, s.xilinxDevice(c))
	}
	s.cards.Store(idx)
	s.logCards(cards)
	if v := s.textAt("", XoclVersion); v != "" {
		inv.DriverVersion, _, _ = strings.Cut(v, ",") // "2.15.225,<git hash>"
	}
	return inv, nil
}

// probeXilinx is ProbeHealth of the xilinx backend.
func (s *Sysfs) probeXilinx(id string) Health {
	c, ok := s.cardFor(id)
	if !ok {
		return Health{Reason: id + " not found on the PCI bus"}
	}
	for _, a := range c.functions() {
		if !s.exists(PCIDevicesDir + "/" + a) {
			return Health{Reason: "PCI function " + PCIDevicesDir + "/" + a + " gone"}
		}
	}
	return s.xilinxDevice(c).Health
}

// xilinxDevice reads one card. It never fails: problems become health
// reasons naming the file.
func (s *Sysfs) xilinxDevice(c card) Device {
	o := s.disc.Xilinx
	d := Device{ID: c.id, Index: c.index, NUMANode: -1, PCIBusID: c.primary(), PCIFunctions: c.functions()}
	var reasons []string
	add := func(r string) {
		if r != "" {
			reasons = append(reasons, r)
		}
	}
	if c.user == "" {
		add(fmt.Sprintf("no shell flashed: card %s has management function %s but no user function", cardKey(c.mgmt), c.mgmt))
	} else {
		u := c.user
		d.NUMANode = s.numaOf(c.id, u)
		d.Model = s.textAt(c.id, hostFn(u, fileBoardName))
		add(s.xilinxDriver(u))
		add(s.flag(u, fileReady, 1, true))
		add(s.flag(u, fileDevOffline, 0, false))
		add(s.flag(u, fileBadState, 0, false))
		if rom := s.prefixed(PCIDevicesDir+"/"+u, subROM); rom != "" {
			vbnv := hostFn(u, rom, fileVBNV)
			d.Firmware = s.textAt(c.id, vbnv)
			if o.Shell != "" && d.Firmware != o.Shell {
				add(fmt.Sprintf("shell %q in %s, want %q", clip(d.Firmware), vbnv, o.Shell))
			}
		} else if o.Shell != "" {
			add(fmt.Sprintf("shell unknown: %s has no %s.* directory", PCIDevicesDir+"/"+u, subROM))
		}
		if xmc := s.prefixed(PCIDevicesDir+"/"+u, subXMC); xmc != "" {
			d.Serial = s.textAt(c.id, hostFn(u, xmc, fileSerialNum))
		}
		drm := hostFn(u, "drm")
		if r := s.numberedEntry(drm, renderPrefix); r == "" {
			add(fmt.Sprintf("render node missing: %s has no %sN", drm, renderPrefix))
		} else {
			n, why := s.readNode(drm+"/"+r+"/"+attrDev, DRIDir+"/"+r)
			add(why)
			d.Nodes = append(d.Nodes, n)
		}
	}
	if !o.NoManagementNodes {
		if c.mgmt == "" {
			add(fmt.Sprintf("management function of card %s missing (its node is injected; discovery.xilinx.managementNodes)", cardKey(c.user)))
		} else if inst, err := s.instance(c.mgmt); err != nil {
			add("management instance " + err.Error())
		} else {
			name := xclmgmtNode + strconv.FormatInt(inst, 10)
			var dev string
			for _, cls := range mgmtClassDirs {
				if p := hostFn(c.mgmt, cls, name, attrDev); s.exists(p) {
					dev = p
					break
				}
			}
			if dev == "" {
				dev = hostFn(c.mgmt, mgmtClassDirs[0], name, attrDev)
			}
			n, why := s.readNode(dev, DevDir+"/"+name)
			add(why)
			d.Nodes = append(d.Nodes, n)
		}
	}
	add(c.conflict)
	if len(d.Nodes) > 0 {
		d.Path, d.Major, d.Minor = d.Nodes[0].Path, d.Nodes[0].Major, d.Nodes[0].Minor
	}
	if len(reasons) == 0 {
		d.Health = Health{Healthy: true}
	} else {
		d.Health = Health{Reason: strings.Join(reasons, "; ")}
	}
	return d
}

// xilinxDriver checks that the user function is bound to xocl.
func (s *Sysfs) xilinxDriver(user string) string {
	host := hostFn(user, "driver")
	target, err := os.Readlink(s.under(host))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Sprintf("%s bound to no driver, want %s", user, xoclDriver)
		}
		return "driver link " + describeErr("read", host, err)
	}
	if drv := filepath.Base(target); drv != xoclDriver {
		return fmt.Sprintf("%s bound to driver %q, want %s", user, clip(drv), xoclDriver)
	}
	return ""
}

// flag checks an integer attribute of the user function (base prefix
// allowed, "0x1"). A missing file is a reason only when required.
func (s *Sysfs) flag(user, name string, want int64, required bool) string {
	host := hostFn(user, name)
	v, err := readAttr(s.under(host))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) && !required {
			return ""
		}
		return describeErr("read", host, err)
	}
	n, err := parseBase0(v)
	if err != nil {
		return fmt.Sprintf("%s: value %q: %v", host, clip(v), err)
	}
	if n != want {
		return fmt.Sprintf("%s %s in %s, want %d", name, clip(v), host, want)
	}
	return ""
}

// telemetryXilinx is Telemetry of the xilinx backend.
func (s *Sysfs) telemetryXilinx(id string) (Telemetry, error) {
	t := Telemetry{Missing: []string{AttrUtilization, AttrMemoryUsed}}
	c, ok := s.cardFor(id)
	if !ok || c.user == "" {
		return t, fmt.Errorf("telemetry of %s: no user function on the PCI bus", id)
	}
	u := c.user
	if !s.exists(PCIDevicesDir + "/" + u) {
		return t, fmt.Errorf("telemetry of %s: PCI function %s gone", id, PCIDevicesDir+"/"+u)
	}
	var errs []error
	xmc := s.prefixed(PCIDevicesDir+"/"+u, subXMC)
	read := func(host string, parse func(string) error) bool {
		v, err := readAttr(s.under(host))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return false
		case err != nil:
			errs = append(errs, errors.New(describeErr("read", host, err)))
		default:
			if err := parse(v); err != nil {
				errs = append(errs, fmt.Errorf("%s: value %q: %w", host, clip(v), err))
			}
		}
		return true
	}
	temp := false
	if xmc != "" {
		temp = read(hostFn(u, xmc, fileXMCTemp), func(v string) error {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < -273 || n > 1000 {
				return errors.New("want integer degrees Celsius from -273 to 1000")
			}
			t.TemperatureCelsius = float64(n)
			return nil
		})
	}
	if !temp {
		if hw := s.numberedEntry(hostFn(u, hwmonDir), hwmonDir); hw != "" {
			temp = read(hostFn(u, hwmonDir, hw, fileHwmonTemp), func(v string) error {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil || n < -273150 || n > 1000000 {
					return errors.New("want integer millidegrees Celsius from -273150 to 1000000")
				}
				t.TemperatureCelsius = float64(n) / 1000
				return nil
			})
		}
	}
	if !temp {
		t.Missing = append(t.Missing, AttrTemperature)
	}
	power := xmc != "" && read(hostFn(u, xmc, fileXMCPower), func(v string) error {
		n, err := parseUint(v)
		if err != nil {
			return err
		}
		t.PowerWatts = float64(n) / 1e6
		return nil
	})
	if !power {
		t.Missing = append(t.Missing, AttrPower)
	}
	if model := s.textAt(id, hostFn(u, fileBoardName)); model == "u55c" {
		t.MemoryTotalBytes = u55cMemoryBytes
	} else {
		t.Missing = append(t.Missing, AttrMemoryTotal)
	}
	return t, errors.Join(errs...)
}

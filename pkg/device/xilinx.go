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

// xilinxBackend reads Alveo cards under XRT (Orion): user and management
// functions paired by card address.
type xilinxBackend struct {
	pciCards
	o   XilinxOptions
	ids *idMap
}

var _ backend = (*xilinxBackend)(nil)

func newXilinxBackend(t *tree, o XilinxOptions, stateDir string) *xilinxBackend {
	return &xilinxBackend{pciCards: pciCards{tree: t, name: BackendXilinx}, o: o, ids: newIDMap(stateDir, BackendXilinx)}
}

// xilinxCards scans the bus for the configured user and management
// functions, bound to their drivers or not, and pairs them by card
// address. IDs come from the card address (see idMap): the rank among the
// cards present at the first discovery, the order hyperdex-smi and XRT
// number them, then kept, so neither an unbound user function nor a card
// flashed later renumbers the others.
func (b *xilinxBackend) xilinxCards() ([]card, error) {
	fns, err := b.scanPCI(b.o.Vendor, "")
	if err != nil {
		return nil, err
	}
	byKey := map[string]*card{}
	for _, f := range fns {
		role := b.role(f)
		if role == nil {
			continue // another Xilinx function (another card model, a DMA function)
		}
		c := byKey[cardKey(f.addr)]
		if c == nil {
			c = &card{}
			byKey[cardKey(f.addr)] = c
		}
		if *role(c) != "" {
			b.warn("ignoring second PCI function of one role on a card", "address", f.addr, "kept", *role(c))
			continue
		}
		*role(c) = f.addr
	}
	keys := sortedKeys(byKey)
	index := b.ids.assign(b.tree, keys)
	cards := make([]card, 0, len(keys))
	for _, k := range keys {
		if i, ok := index[k]; ok {
			c := *byKey[k]
			c.index, c.id = i, ID(i)
			cards = append(cards, c)
		}
	}
	slices.SortFunc(cards, func(a, b card) int { return a.index - b.index })
	b.instanceConflicts(cards)
	return cards, nil
}

// role says which field of a card a function fills: its user or
// management function (by device ID alone: an unbound function has none
// of its driver's files), nil for neither.
func (b *xilinxBackend) role(f pciFunc) func(*card) *string {
	switch f.device {
	case b.o.UserDevice:
		return func(c *card) *string { return &c.user }
	case b.o.MgmtDevice:
		return func(c *card) *string { return &c.mgmt }
	}
	return nil
}

// instanceConflicts marks cards whose management functions claim one
// instance number: their /dev/xclmgmt<instance> would be one node.
func (b *xilinxBackend) instanceConflicts(cards []card) {
	if b.o.NoManagementNodes {
		return
	}
	claimed := map[int64][]int{}
	for i, c := range cards {
		if c.mgmt == "" {
			continue
		}
		if inst, err := b.instance(c.mgmt); err == nil {
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
func (b *xilinxBackend) instance(mgmt string) (int64, error) {
	host := hostFn(mgmt, fileInstance)
	v, err := readAttr(b.under(host))
	if err != nil {
		return 0, errors.New(describeErr("read", host, err))
	}
	n, err := parseDecimal(v, 1<<32-1)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", host, err)
	}
	return n, nil
}

func (b *xilinxBackend) discover(ctx context.Context) (*Inventory, error) {
	cards, err := b.xilinxCards()
	if err != nil {
		return nil, err
	}
	inv := &Inventory{Devices: make([]Device, 0, len(cards))}
	for _, c := range cards {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		inv.Devices = append(inv.Devices, b.device(c))
	}
	b.store(cards)
	if v := b.textAt("", XoclVersion); v != "" {
		inv.DriverVersion, _, _ = strings.Cut(v, ",") // "2.15.225,<git hash>"
	}
	return inv, nil
}

// rescan is a discover for cardFor.
func (b *xilinxBackend) rescan() error {
	_, err := b.discover(context.Background())
	return err
}

func (b *xilinxBackend) probe(id string) Health {
	c, ok := b.cardFor(id, b.rescan)
	if !ok {
		return Health{Reason: id + " not found on the PCI bus"}
	}
	for _, a := range c.functions() {
		if !b.exists(PCIDevicesDir + "/" + a) {
			return Health{Reason: "PCI function " + PCIDevicesDir + "/" + a + " gone"}
		}
	}
	return b.device(c).Health
}

func (b *xilinxBackend) watchPaths() []string { return b.watch(DRIDir) }

func (b *xilinxBackend) indexRingWarning() string {
	return "no network table and no rings configured: the LPUs form one ring in PCI address order, which is right only when the cards are cabled in that order (set topology.networkTable or topology.rings)"
}

// reasons collects health reasons, skipping empty ones.
type reasons []string

func (r *reasons) add(why string) {
	if why != "" {
		*r = append(*r, why)
	}
}

// health is Healthy when there is no reason, else the reasons joined.
func (r reasons) health() Health {
	if len(r) == 0 {
		return Health{Healthy: true}
	}
	return Health{Reason: strings.Join(r, "; ")}
}

// device reads one card. It never fails: problems become health reasons
// naming the file.
func (b *xilinxBackend) device(c card) Device {
	d := Device{ID: c.id, Index: c.index, NUMANode: -1, PCIBusID: c.primary(), PCIFunctions: c.functions()}
	var why reasons
	if c.user == "" {
		why.add(fmt.Sprintf("no shell flashed: card %s has management function %s but no user function", cardKey(c.mgmt), c.mgmt))
	} else {
		b.userFunction(c, &d, &why)
	}
	if !b.o.NoManagementNodes {
		b.mgmtNode(c, &d, &why)
	}
	why.add(c.conflict)
	if len(d.Nodes) > 0 {
		d.Path, d.Major, d.Minor = d.Nodes[0].Path, d.Nodes[0].Major, d.Nodes[0].Minor
	}
	d.Health = why.health()
	return d
}

// userFunction reads the user function of a card into d: attributes,
// health flags, shell, serial and render node.
func (b *xilinxBackend) userFunction(c card, d *Device, why *reasons) {
	u := c.user
	d.NUMANode = b.numaAt(c.id, hostFn(u, attrNUMA))
	if !b.exists(hostFn(u, fileUserPF)) {
		why.add(fmt.Sprintf("user function %s not bound to %s: no %s (probe failure, unbind, or not bound yet)", u, xoclDriver, hostFn(u, fileUserPF)))
		return
	}
	d.Model = b.textAt(c.id, hostFn(u, fileBoardName))
	why.add(b.xoclDriver(u))
	why.add(b.flag(u, fileReady, 1, true))
	why.add(b.flag(u, fileDevOffline, 0, false))
	why.add(b.flag(u, fileBadState, 0, false))
	if rom := b.prefixed(PCIDevicesDir+"/"+u, subROM); rom != "" {
		vbnv := hostFn(u, rom, fileVBNV)
		d.Firmware = b.textAt(c.id, vbnv)
		if b.o.Shell != "" && d.Firmware != b.o.Shell {
			why.add(fmt.Sprintf("shell %q in %s, want %q", clip(d.Firmware), vbnv, b.o.Shell))
		}
	} else if b.o.Shell != "" {
		why.add(fmt.Sprintf("shell unknown: %s has no %s.* directory", PCIDevicesDir+"/"+u, subROM))
	}
	if xmc := b.prefixed(PCIDevicesDir+"/"+u, subXMC); xmc != "" {
		d.Serial = b.textAt(c.id, hostFn(u, xmc, fileSerialNum))
	}
	drm := hostFn(u, "drm")
	r := b.numberedEntry(drm, renderPrefix)
	if r == "" {
		why.add(fmt.Sprintf("render node missing: %s has no %sN", drm, renderPrefix))
		return
	}
	n, bad := b.readNode(drm+"/"+r+"/"+attrDev, DRIDir+"/"+r, renderDriverName)
	why.add(bad)
	d.Nodes = append(d.Nodes, n)
}

// The names /proc/devices registers the xilinx nodes' majors under: DRM's
// for render nodes, xclmgmt's for management nodes.
const (
	renderDriverName  = "drm"
	xclmgmtDriverName = xclmgmtNode
)

// mgmtNode reads the management node of a card into d.
func (b *xilinxBackend) mgmtNode(c card, d *Device, why *reasons) {
	if c.mgmt == "" {
		why.add(fmt.Sprintf("management function of card %s missing (its node is injected; discovery.xilinx.managementNodes)", cardKey(c.user)))
		return
	}
	if !b.exists(hostFn(c.mgmt, fileMgmtPF)) {
		why.add(fmt.Sprintf("management function %s not bound to %s: no %s", c.mgmt, xclmgmtNode, hostFn(c.mgmt, fileMgmtPF)))
		return
	}
	// xclmgmt prints ready as %d; absent in old XRT releases.
	why.add(b.flag(c.mgmt, fileReady, 1, false))
	inst, err := b.instance(c.mgmt)
	if err != nil {
		why.add("management instance " + err.Error())
		return
	}
	name := xclmgmtNode + strconv.FormatInt(inst, 10)
	dev := hostFn(c.mgmt, mgmtClassDirs[0], name, attrDev)
	for _, cls := range mgmtClassDirs {
		if p := hostFn(c.mgmt, cls, name, attrDev); b.exists(p) {
			dev = p
			break
		}
	}
	n, bad := b.readNode(dev, DevDir+"/"+name, xclmgmtDriverName)
	why.add(bad)
	d.Nodes = append(d.Nodes, n)
}

// xoclDriver checks that the user function is bound to xocl.
func (b *xilinxBackend) xoclDriver(user string) string {
	host := hostFn(user, "driver")
	target, err := os.Readlink(b.under(host))
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

// flag checks an integer attribute of a function (base prefix allowed,
// "0x1"). A missing file is a reason only when required.
func (b *xilinxBackend) flag(fn, name string, want int64, required bool) string {
	host := hostFn(fn, name)
	v, err := readAttr(b.under(host))
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

// sensors reads the telemetry files of one user function, collecting
// read and parse errors.
type sensors struct {
	*tree
	errs []error
}

// errNoReading is what a parser returns for a value that is no reading:
// XMC's 0 when its mailbox failed.
var errNoReading = errors.New("no reading")

// read reads host and parses it; false when the file is absent or holds
// no reading.
func (r *sensors) read(host string, parse func(string) error) bool {
	v, err := readAttr(r.under(host))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false
	case err != nil:
		r.errs = append(r.errs, errors.New(describeErr("read", host, err)))
	default:
		if err := parse(v); errors.Is(err, errNoReading) {
			return false
		} else if err != nil {
			r.errs = append(r.errs, fmt.Errorf("%s: value %q: %w", host, clip(v), err))
		}
	}
	return true
}

func (b *xilinxBackend) telemetry(id string) (Telemetry, error) {
	t := Telemetry{Missing: []string{AttrUtilization, AttrMemoryUsed}}
	c, ok := b.cardFor(id, b.rescan)
	if !ok || c.user == "" {
		return t, fmt.Errorf("telemetry of %s: no user function on the PCI bus", id)
	}
	u := c.user
	if !b.exists(PCIDevicesDir + "/" + u) {
		return t, fmt.Errorf("telemetry of %s: PCI function %s gone", id, PCIDevicesDir+"/"+u)
	}
	r := &sensors{tree: b.tree}
	xmc := b.prefixed(PCIDevicesDir+"/"+u, subXMC)
	if !b.temperature(r, u, xmc, &t) {
		t.Missing = append(t.Missing, AttrTemperature)
	}
	if !b.power(r, u, xmc, &t) {
		t.Missing = append(t.Missing, AttrPower)
	}
	if model := b.textAt(id, hostFn(u, fileBoardName)); model == "u55c" {
		t.MemoryTotalBytes = u55cMemoryBytes
	} else {
		t.Missing = append(t.Missing, AttrMemoryTotal)
	}
	return t, errors.Join(r.errs...)
}

// temperature reads the card's temperature from xmc, else hwmon. A
// reading of exactly 0 is no reading: the user function's sensors come
// from the management side over a mailbox and read 0 when it fails.
func (b *xilinxBackend) temperature(r *sensors, u, xmc string, t *Telemetry) bool {
	if xmc != "" && r.read(hostFn(u, xmc, fileXMCTemp), func(v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		switch {
		case err != nil || n < -273 || n > 1000:
			return errors.New("want integer degrees Celsius from -273 to 1000")
		case n == 0:
			return errNoReading
		}
		t.TemperatureCelsius = float64(n)
		return nil
	}) {
		return true
	}
	hw := b.hwmonTemp(u)
	return hw != "" && r.read(hw, func(v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		switch {
		case err != nil || n < -273150 || n > 1000000:
			return errors.New("want integer millidegrees Celsius from -273150 to 1000000")
		case n == 0:
			return errNoReading
		}
		t.TemperatureCelsius = float64(n) / 1000
		return nil
	})
}

// hwmonTemp is the host path of the temperature file of the user
// function's hwmon: the one XRT's xmc registers (name "<VBNV>_user"), else
// the first by number with a temp*_input. XRT registers up to three
// (xmc, sysmon, microblaze); "" when none has a temperature.
func (b *xilinxBackend) hwmonTemp(u string) string {
	dir := hostFn(u, hwmonDir)
	first := ""
	for _, hw := range b.numberedEntries(dir, hwmonDir) {
		f := b.tempInput(dir + "/" + hw)
		if f == "" {
			continue
		}
		if strings.HasSuffix(b.textAt("", dir+"/"+hw+"/name"), "_user") {
			return f
		}
		if first == "" {
			first = f
		}
	}
	return first
}

// tempInput is an hwmon's temperature file: temp4_input (xmc's FPGA
// temperature), else its first temp*_input; "" when none.
func (b *xilinxBackend) tempInput(hwDir string) string {
	if b.exists(hwDir + "/" + fileHwmonTemp) {
		return hwDir + "/" + fileHwmonTemp
	}
	entries, err := os.ReadDir(b.under(hwDir))
	if err != nil {
		return ""
	}
	for _, e := range entries {
		if n := e.Name(); strings.HasPrefix(n, "temp") && strings.HasSuffix(n, "_input") {
			return hwDir + "/" + n
		}
	}
	return ""
}

// power reads the card's power from xmc.
func (b *xilinxBackend) power(r *sensors, u, xmc string, t *Telemetry) bool {
	return xmc != "" && r.read(hostFn(u, xmc, fileXMCPower), func(v string) error {
		n, err := parseUint(v)
		switch {
		case err != nil:
			return err
		case n == 0:
			return errNoReading // a failed mailbox, as for temperature
		}
		t.PowerWatts = float64(n) / 1e6
		return nil
	})
}

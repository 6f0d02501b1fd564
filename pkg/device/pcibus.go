package device

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
)

// Host paths the PCI backends (xilinx, pci) read.
const (
	PCIDevicesDir = "/sys/bus/pci/devices"
	XoclVersion   = "/sys/module/xocl/version"
	DRIDir        = "/dev/dri"
)

// pciFunc is one PCI function of the configured vendor.
type pciFunc struct {
	addr   string // "0000:17:00.1", lower case
	device string // "0x505d"
}

// card is one LPU the last scan of a PCI backend found: its ID and PCI
// functions. conflict is a health reason found across cards (two cards
// claiming one management instance).
type card struct {
	id       string
	index    int
	user     string // xilinx user function; pci: the function
	mgmt     string // xilinx management function; "" when absent
	conflict string
}

// primary is the address naming the card: its user function, else its
// management function.
func (c card) primary() string {
	if c.user != "" {
		return c.user
	}
	return c.mgmt
}

// functions are the card's PCI functions, primary first.
func (c card) functions() []string {
	var fs []string
	for _, a := range []string{c.user, c.mgmt} {
		if a != "" {
			fs = append(fs, a)
		}
	}
	return fs
}

// cardIndex maps the IDs of the last scan to their cards, so ProbeHealth
// does not walk the bus on every poll.
type cardIndex struct{ byID map[string]card }

// pciCards is the state both PCI backends keep: the cards of the last
// scan and the address → ID map last logged.
type pciCards struct {
	*tree
	name    string // the backend, for the log
	last    atomic.Pointer[cardIndex]
	lastMap atomic.Pointer[string]
}

// store keeps the cards of a scan and logs the address → ID map when it
// differs from the last one logged (at start and whenever cards come and
// go).
func (p *pciCards) store(cards []card) {
	idx := &cardIndex{byID: make(map[string]card, len(cards))}
	pairs := make([]string, len(cards))
	for i, c := range cards {
		idx.byID[c.id] = c
		pairs[i] = c.primary() + "=" + c.id
	}
	p.last.Store(idx)
	m := strings.Join(pairs, ",")
	if old := p.lastMap.Swap(&m); old == nil || *old != m {
		p.log.Info("PCI address to LPU ID map", "backend", p.name, "map", m)
	}
}

// cardFor returns the card the last scan gave id, running scan when there
// was none yet.
func (p *pciCards) cardFor(id string, scan func() error) (card, bool) {
	idx := p.last.Load()
	if idx == nil {
		if err := scan(); err != nil {
			return card{}, false
		}
		if idx = p.last.Load(); idx == nil {
			return card{}, false
		}
	}
	c, ok := idx.byID[id]
	return c, ok
}

// watch is watchPaths of the PCI backends: the bus, each LPU's function
// directories, /dev, then extra host directories.
func (p *pciCards) watch(extra ...string) []string {
	var paths []string
	add := func(host string) {
		if fi, err := os.Stat(p.under(host)); err == nil && fi.IsDir() {
			paths = append(paths, p.under(host))
		}
	}
	add(PCIDevicesDir)
	if idx := p.last.Load(); idx != nil {
		cards := make([]card, 0, len(idx.byID))
		for _, c := range idx.byID {
			cards = append(cards, c)
		}
		slices.SortFunc(cards, func(a, b card) int { return a.index - b.index })
		for _, c := range cards {
			for _, a := range c.functions() {
				add(PCIDevicesDir + "/" + a)
			}
		}
	}
	add(DevDir)
	for _, h := range extra {
		add(h)
	}
	return paths
}

// attrRings: the PCI layouts have no ring attributes.
func (p *pciCards) attrRings([]Device) ([][]string, bool, error) { return nil, false, nil }

// cardKey is the address of a card: its function address without ".F".
func cardKey(addr string) string { return addr[:len(addr)-2] }

// hostFn is the host path of one attribute of a PCI function.
func hostFn(addr string, rel ...string) string {
	return PCIDevicesDir + "/" + addr + "/" + strings.Join(rel, "/")
}

// scanPCI lists the functions under /sys/bus/pci/devices whose vendor is
// vendor (and class, when class is not ""), ascending by address. An entry
// that is not a PCI address is skipped; one whose vendor, device or class
// cannot be read is skipped with a warning naming it: one broken entry
// never stops the scan. Only an unreadable directory is an error.
func (t *tree) scanPCI(vendor, class string) ([]pciFunc, error) {
	entries, err := os.ReadDir(t.under(PCIDevicesDir))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%s missing: sysfs not mounted under the discovery root? %w", PCIDevicesDir, err)
		}
		return nil, fmt.Errorf("list PCI devices: %s", describeErr("read", PCIDevicesDir, err))
	}
	var fns []pciFunc
	for _, e := range entries {
		addr := strings.ToLower(e.Name())
		if !isPCIAddress(addr) || addr != e.Name() {
			continue
		}
		v, err := readAttr(t.under(hostFn(addr, "vendor")))
		if err != nil {
			t.warn("skipping PCI entry", "address", addr, "err", describeErr("read", hostFn(addr, "vendor"), err))
			continue
		}
		if !strings.EqualFold(v, vendor) {
			continue
		}
		if class != "" {
			c, err := readAttr(t.under(hostFn(addr, "class")))
			if err != nil {
				t.warn("skipping PCI entry", "address", addr, "err", describeErr("read", hostFn(addr, "class"), err))
				continue
			}
			if !strings.EqualFold(c, class) {
				continue
			}
		}
		d, err := readAttr(t.under(hostFn(addr, "device")))
		if err != nil {
			t.warn("skipping PCI entry", "address", addr, "err", describeErr("read", hostFn(addr, "device"), err))
			continue
		}
		fns = append(fns, pciFunc{addr: addr, device: strings.ToLower(d)})
	}
	slices.SortFunc(fns, func(a, b pciFunc) int { return strings.Compare(a.addr, b.addr) })
	return fns, nil
}

// parseBase0 parses an integer attribute the way the driver prints it
// ("0x1", "1"): base prefix allowed.
func parseBase0(v string) (int64, error) {
	n, err := strconv.ParseInt(v, 0, 64)
	if err != nil {
		return 0, errors.New("want an integer")
	}
	return n, nil
}

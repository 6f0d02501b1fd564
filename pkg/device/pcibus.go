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
func (s *Sysfs) scanPCI(vendor, class string) ([]pciFunc, error) {
	entries, err := os.ReadDir(s.under(PCIDevicesDir))
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
		v, err := readAttr(s.under(hostFn(addr, "vendor")))
		if err != nil {
			s.warn("skipping PCI entry", "address", addr, "err", describeErr("read", hostFn(addr, "vendor"), err))
			continue
		}
		if !strings.EqualFold(v, vendor) {
			continue
		}
		if class != "" {
			c, err := readAttr(s.under(hostFn(addr, "class")))
			if err != nil {
				s.warn("skipping PCI entry", "address", addr, "err", describeErr("read", hostFn(addr, "class"), err))
				continue
			}
			if !strings.EqualFold(c, class) {
				continue
			}
		}
		d, err := readAttr(s.under(hostFn(addr, "device")))
		if err != nil {
			s.warn("skipping PCI entry", "address", addr, "err", describeErr("read", hostFn(addr, "device"), err))
			continue
		}
		fns = append(fns, pciFunc{addr: addr, device: strings.ToLower(d)})
	}
	slices.SortFunc(fns, func(a, b pciFunc) int { return strings.Compare(a.addr, b.addr) })
	return fns, nil
}

// exists reports whether hostPath exists under the root (lstat).
func (s *Sysfs) exists(hostPath string) bool {
	_, err := os.Lstat(s.under(hostPath))
	return err == nil
}

// prefixed returns the name of the first directory (by name) in hostDir
// named "<name>.<something>": XRT's subdevices are "rom.u.<inst>",
// "xmc.u.<inst>" with an instance that varies by version, and a plain file
// "rom" may sit beside them, so a bare prefix never matches. "" when none.
func (s *Sysfs) prefixed(hostDir, name string) string {
	entries, err := os.ReadDir(s.under(hostDir))
	if err != nil {
		return ""
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), name+".") && len(e.Name()) > len(name)+1 {
			if fi, err := os.Stat(filepath.Join(s.under(hostDir), e.Name())); err == nil && fi.IsDir() {
				return e.Name()
			}
		}
	}
	return ""
}

// numberedEntry returns the first entry of hostDir named prefix followed by
// a decimal (renderD128, ha0), "" when none.
func (s *Sysfs) numberedEntry(hostDir, prefix string) string {
	entries, err := os.ReadDir(s.under(hostDir))
	if err != nil {
		return ""
	}
	for _, e := range entries {
		if rest, ok := strings.CutPrefix(e.Name(), prefix); ok {
			if _, err := parseDecimal(rest, 1<<20); err == nil {
				return e.Name()
			}
		}
	}
	return ""
}

// readNode reads the dev attribute of a node's sysfs directory and checks
// the node at nodePath. It returns the node (numbers 0 when unknown) and a
// health reason, "" when the node is usable.
func (s *Sysfs) readNode(devAttr, nodePath string) (Node, string) {
	n := Node{Path: nodePath}
	v, err := readAttr(s.under(devAttr))
	if err != nil {
		return n, "dev attribute " + describeErr("read", devAttr, err)
	}
	ma, mi, err := ParseDev(v)
	if err != nil {
		return n, fmt.Sprintf("dev attribute %s: %v", devAttr, err)
	}
	n.Major, n.Minor = ma, mi
	if err := s.checkNode(nodePath, ma, mi, true); err != nil {
		return n, err.Error()
	}
	return n, ""
}

// numaOf reads a PCI function's numa_node; -1 when absent or bad (warned).
func (s *Sysfs) numaOf(id, addr string) int {
	host := hostFn(addr, attrNUMA)
	v, err := readAttr(s.under(host))
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			s.warn("ignoring numa_node", "device", id, "err", describeErr("read", host, err))
		}
		return -1
	}
	n, err := parseNUMA(v)
	if err != nil {
		s.warn("ignoring numa_node", "device", id, "file", host, "value", clip(v), "err", err)
	}
	return n
}

// textAt reads a free-text attribute at a host path; "" when absent.
func (s *Sysfs) textAt(id, host string) string {
	v, err := readAttr(s.under(host))
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			s.warn("ignoring attribute", "device", id, "err", describeErr("read", host, err))
		}
		return ""
	}
	return cleanText(v)
}

// cardFor returns the card the last scan gave id, scanning when there was
// none yet.
func (s *Sysfs) cardFor(id string) (card, bool) {
	idx := s.cards.Load()
	if idx == nil {
		if _, err := s.Discover(context.Background()); err != nil {
			return card{}, false
		}
		idx = s.cards.Load()
		if idx == nil {
			return card{}, false
		}
	}
	c, ok := idx.byID[id]
	return c, ok
}

// logCards logs the address → ID map when it differs from the last one
// logged (at start and whenever cards come and go).
func (s *Sysfs) logCards(cards []card) {
	pairs := make([]string, len(cards))
	for i, c := range cards {
		pairs[i] = c.primary() + "=" + c.id
	}
	m := strings.Join(pairs, ",")
	if old := s.lastMap.Swap(&m); old == nil || *old != m {
		s.log.Info("PCI address to LPU ID map", "backend", s.disc.Backend, "map", m)
	}
}

// watchPCI is WatchPaths of the PCI backends.
func (s *Sysfs) watchPCI() []string {
	var paths []string
	add := func(host string) {
		if fi, err := os.Stat(s.under(host)); err == nil && fi.IsDir() {
			paths = append(paths, s.under(host))
		}
	}
	add(PCIDevicesDir)
	if idx := s.cards.Load(); idx != nil {
		ids := make([]string, 0, len(idx.byID))
		for id := range idx.byID {
			ids = append(ids, id)
		}
		slices.SortFunc(ids, func(a, b string) int { return idx.byID[a].index - idx.byID[b].index })
		for _, id := range ids {
			for _, a := range idx.byID[id].functions() {
				add(PCIDevicesDir + "/" + a)
			}
		}
	}
	add(DevDir)
	if s.disc.Backend == BackendXilinx {
		add(DRIDir)
	}
	return paths
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

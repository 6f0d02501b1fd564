package device

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// pciBackend reads PCI accelerators selected by vendor and class whose
// node is <function>/<class dir>/<name>/dev (Bertha: /dev/haN).
type pciBackend struct {
	pciCards
	o   PCIOptions
	ids *idMap
}

var _ backend = (*pciBackend)(nil)

func newPCIBackend(t *tree, o PCIOptions, stateDir string) *pciBackend {
	return &pciBackend{pciCards: pciCards{tree: t, name: BackendPCI}, o: o, ids: newIDMap(stateDir, BackendPCI)}
}

// discover: IDs follow the PCI address (see idMap): the driver numbers
// its nodes in probe order, which need not be bus order, so an ID is never
// derived from a node name.
func (b *pciBackend) discover(ctx context.Context) (*Inventory, error) {
	fns, err := b.scanPCI(b.o.Vendor, b.o.Class)
	if err != nil {
		return nil, err
	}
	keys := make([]string, len(fns))
	for i, f := range fns {
		keys[i] = f.addr
	}
	index := b.ids.assign(b.tree, keys)
	cards := make([]card, 0, len(fns))
	for _, k := range keys {
		if i, ok := index[k]; ok {
			cards = append(cards, card{id: ID(i), index: i, user: k})
		}
	}
	slices.SortFunc(cards, func(a, b card) int { return a.index - b.index })
	inv := &Inventory{Devices: make([]Device, 0, len(cards))}
	for _, c := range cards {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		inv.Devices = append(inv.Devices, b.device(c))
	}
	b.store(cards)
	if len(fns) > 0 {
		inv.DriverVersion = b.moduleVersion(fns[0].addr)
	}
	return inv, nil
}

// rescan is a discover for cardFor.
func (b *pciBackend) rescan() error {
	_, err := b.discover(context.Background())
	return err
}

// boundDriver is the name of the driver addr is bound to, "" when none.
func (b *pciBackend) boundDriver(addr string) string {
	target, err := os.Readlink(b.under(hostFn(addr, "driver")))
	if err != nil {
		return ""
	}
	if drv := filepath.Base(target); isPlainName(drv) {
		return drv
	}
	return ""
}

// moduleVersion is /sys/module/<driver of addr>/version, "" when unknown.
func (b *pciBackend) moduleVersion(addr string) string {
	drv := b.boundDriver(addr)
	if drv == "" {
		return ""
	}
	return b.textAt("", "/sys/module/"+drv+"/version")
}

func (b *pciBackend) probe(id string) Health {
	c, ok := b.cardFor(id, b.rescan)
	if !ok {
		return Health{Reason: id + " not found on the PCI bus"}
	}
	return b.device(c).Health
}

// device reads one function. It never fails: problems become health
// reasons naming the file.
func (b *pciBackend) device(c card) Device {
	addr := c.user
	d := Device{ID: c.id, Index: c.index, NUMANode: -1, PCIBusID: addr, PCIFunctions: []string{addr}}
	fn := PCIDevicesDir + "/" + addr
	var why reasons
	if !b.exists(fn) {
		why.add("PCI function " + fn + " gone")
	} else {
		d.NUMANode = b.numaAt(c.id, hostFn(addr, attrNUMA))
		b.node(addr, &d, &why)
		why.add(b.healthAttribute(fn))
	}
	if len(why) == 0 && b.o.Health != nil {
		if h := b.o.Health.CheckHealth(c.id, addr); !h.Healthy {
			why.add(h.Reason)
		}
	}
	d.Health = why.health()
	return d
}

// node finds and checks the function's device node.
func (b *pciBackend) node(addr string, d *Device, why *reasons) {
	fn := PCIDevicesDir + "/" + addr
	cls, name := b.findNode(fn)
	switch {
	case name != "":
	case b.o.ClassDir != "":
		why.add(fmt.Sprintf("device node unknown: %s has no directory with a dev attribute", cls))
		return
	default:
		why.add(fmt.Sprintf("device node unknown: %s has no <dir>/<name>/dev (set discovery.pci.classDir?)", fn))
		return
	}
	driver := b.o.Driver
	if driver == "" {
		driver = b.boundDriver(addr)
	}
	if driver == "" {
		why.add(fmt.Sprintf("%s bound to no driver: the major of %s is not checked (set discovery.pci.driver)", addr, DevDir+"/"+name))
	}
	n, bad := b.readNode(cls+"/"+name+"/"+attrDev, DevDir+"/"+name, driver)
	d.Nodes = []Node{n}
	d.Path, d.Major, d.Minor = n.Path, n.Major, n.Minor
	why.add(bad)
}

// findNode returns the class directory and node name of a function: under
// the configured ClassDir, else (the name is not public; go-halib does the
// same) the first subdirectory, by name, holding <name>/dev. Only real
// directories with plain names count, never a link (driver, subsystem).
// The directory found is logged once.
func (b *pciBackend) findNode(fn string) (cls, name string) {
	if b.o.ClassDir != "" {
		cls = fn + "/" + b.o.ClassDir
		return cls, b.nodeName(cls)
	}
	entries, err := os.ReadDir(b.under(fn))
	if err != nil {
		return "", ""
	}
	for _, e := range entries {
		if !e.IsDir() || !isNodeName(e.Name()) || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		cls = fn + "/" + e.Name()
		if name = b.nodeName(cls); name != "" {
			b.note("found the device node's class directory", "function", fn, "classDir", e.Name())
			return cls, name
		}
	}
	return "", ""
}

// healthAttribute checks the configured health attribute, "" when healthy
// or not configured.
func (b *pciBackend) healthAttribute(fn string) string {
	if b.o.HealthAttribute == "" {
		return ""
	}
	host := fn + "/" + b.o.HealthAttribute
	v, err := readAttr(b.under(host))
	if err != nil {
		return "health attribute " + describeErr("read", host, err)
	}
	if v != b.o.HealthValue {
		return fmt.Sprintf("%s is %q, want %q", host, clip(v), b.o.HealthValue)
	}
	return ""
}

// nodeName returns the first entry of the class directory that holds a dev
// attribute and is a plain name ("ha3"), "" when none.
func (b *pciBackend) nodeName(hostDir string) string {
	entries, err := os.ReadDir(b.under(hostDir))
	if err != nil {
		return ""
	}
	for _, e := range entries {
		if n := e.Name(); isNodeName(n) && b.exists(hostDir+"/"+n+"/"+attrDev) {
			return n
		}
	}
	return ""
}

// isNodeName reports whether n can name a device node: one plain,
// printable path element without spaces.
func isNodeName(n string) bool {
	return isPlainName(n) && cleanText(n) == n && !strings.ContainsAny(n, " \t")
}

// telemetry: Bertha reports telemetry through its vendor library, not
// sysfs, so everything is Missing.
func (b *pciBackend) telemetry(id string) (Telemetry, error) {
	if _, ok := b.cardFor(id, b.rescan); !ok {
		return Telemetry{}, fmt.Errorf("telemetry of %s: not found on the PCI bus", id)
	}
	return Telemetry{Missing: []string{AttrUtilization, AttrMemoryUsed, AttrMemoryTotal, AttrTemperature, AttrPower}}, nil
}

func (b *pciBackend) watchPaths() []string { return b.watch() }

func (b *pciBackend) indexRingWarning() string { return "" }

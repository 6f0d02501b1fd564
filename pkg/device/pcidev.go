package device

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// discoverPCI is Discover of the pci backend, without the topology. IDs
// follow ascending PCI address: the driver numbers its nodes in probe
// order, which need not be bus order, so an ID is never derived from a
// node name.
func (s *Sysfs) discoverPCI(ctx context.Context) (*Inventory, error) {
	o := s.disc.PCI
	fns, err := s.scanPCI(o.Vendor, o.Class)
	if err != nil {
		return nil, err
	}
	cards := make([]card, len(fns))
	idx := &cardIndex{byID: make(map[string]card, len(fns))}
	inv := &Inventory{Devices: make([]Device, 0, len(fns))}
	for i, f := range fns {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		cards[i] = card{id: ID(i), index: i, user: f.addr}
		idx.byID[cards[i].id] = cards[i]
		inv.Devices = append(inv.Devices, s.pciDevice(cards[i]))
	}
	s.cards.Store(idx)
	s.logCards(cards)
	if len(fns) > 0 {
		inv.DriverVersion = s.moduleVersion(fns[0].addr)
	}
	return inv, nil
}

// moduleVersion is /sys/module/<driver of addr>/version, "" when unknown.
func (s *Sysfs) moduleVersion(addr string) string {
	target, err := os.Readlink(s.under(hostFn(addr, "driver")))
	if err != nil {
		return ""
	}
	drv := filepath.Base(target)
	if !isPlainName(drv) {
		return ""
	}
	return s.textAt("", "/sys/module/"+drv+"/version")
}

// probePCI is ProbeHealth of the pci backend.
func (s *Sysfs) probePCI(id string) Health {
	c, ok := s.cardFor(id)
	if !ok {
		return Health{Reason: id + " not found on the PCI bus"}
	}
	return s.pciDevice(c).Health
}

// pciDevice reads one function. It never fails: problems become health
// reasons naming the file.
func (s *Sysfs) pciDevice(c card) Device {
	o := s.disc.PCI
	addr := c.user
	d := Device{ID: c.id, Index: c.index, NUMANode: -1, PCIBusID: addr, PCIFunctions: []string{addr}}
	fn := PCIDevicesDir + "/" + addr
	var reasons []string
	if !s.exists(fn) {
		reasons = append(reasons, "PCI function "+fn+" gone")
	} else {
		d.NUMANode = s.numaOf(c.id, addr)
		cls := fn + "/" + o.ClassDir
		name := s.nodeName(cls)
		if name == "" {
			reasons = append(reasons, fmt.Sprintf("device node unknown: %s has no directory with a dev attribute", cls))
		} else {
			n, why := s.readNode(cls+"/"+name+"/"+attrDev, DevDir+"/"+name)
			d.Nodes = []Node{n}
			d.Path, d.Major, d.Minor = n.Path, n.Major, n.Minor
			if why != "" {
				reasons = append(reasons, why)
			}
		}
		if o.HealthAttribute != "" {
			host := fn + "/" + o.HealthAttribute
			if v, err := readAttr(s.under(host)); err != nil {
				reasons = append(reasons, "health attribute "+describeErr("read", host, err))
			} else if v != o.HealthValue {
				reasons = append(reasons, fmt.Sprintf("%s is %q, want %q", host, clip(v), o.HealthValue))
			}
		}
	}
	if len(reasons) == 0 && o.Health != nil {
		if h := o.Health.CheckHealth(c.id, addr); !h.Healthy {
			reasons = append(reasons, h.Reason)
		}
	}
	if len(reasons) == 0 {
		d.Health = Health{Healthy: true}
	} else {
		d.Health = Health{Reason: strings.Join(reasons, "; ")}
	}
	return d
}

// nodeName returns the first entry of the class directory that holds a dev
// attribute and is a plain name ("ha3"), "" when none.
func (s *Sysfs) nodeName(hostDir string) string {
	entries, err := os.ReadDir(s.under(hostDir))
	if err != nil {
		return ""
	}
	for _, e := range entries {
		if n := e.Name(); isPlainName(n) && cleanText(n) == n && !strings.ContainsAny(n, " \t") && s.exists(hostDir+"/"+n+"/"+attrDev) {
			return n
		}
	}
	return ""
}

// telemetryPCI is Telemetry of the pci backend: Bertha reports telemetry
// through its vendor library, not sysfs, so everything is Missing.
func (s *Sysfs) telemetryPCI(id string) (Telemetry, error) {
	if _, ok := s.cardFor(id); !ok {
		return Telemetry{}, fmt.Errorf("telemetry of %s: not found on the PCI bus", id)
	}
	return Telemetry{Missing: []string{AttrUtilization, AttrMemoryUsed, AttrMemoryTotal, AttrTemperature, AttrPower}}, nil
}

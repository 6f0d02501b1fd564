package device

import (
	"context"
	"fmt"
	"strings"
)

// backend is one discovery layout: what Sysfs asks of it. Sysfs resolves
// the topology itself, once, for every backend.
type backend interface {
	// discover finds the LPUs, their health and the driver version.
	discover(ctx context.Context) (*Inventory, error)
	// probe re-reads what decides the health of one LPU (a valid ID).
	probe(id string) Health
	// telemetry reads the telemetry of one LPU (a valid ID).
	telemetry(id string) (Telemetry, error)
	// watchPaths are the paths under the root worth watching.
	watchPaths() []string
	// attrRings are the rings the layout's own attributes give; found
	// is false when it has none.
	attrRings(devs []Device) (rings [][]string, found bool, err error)
	// indexRingWarning is logged when the rings of more than one LPU
	// fall back to index order; "" logs nothing.
	indexRingWarning() string
}

// newBackend returns the backend d selects (d has its defaults).
func newBackend(t *tree, d Discovery, stateDir string) backend {
	switch d.Backend {
	case BackendXilinx:
		return newXilinxBackend(t, d.Xilinx, stateDir)
	case BackendPCI:
		return newPCIBackend(t, d.PCI, stateDir)
	default:
		return &lpuBackend{t}
	}
}

// Discovery backends, the values of Discovery.Backend (and of the config's
// discovery.backend). Each yields the same Inventory.
const (
	// BackendLPU reads the layout this package defines: /sys/class/lpu/lpuN
	// and /dev/lpuN. The default.
	BackendLPU = "lpu"
	// BackendXilinx reads Alveo cards under the XRT drivers (Orion): PCI
	// user and management functions under /sys/bus/pci/devices, nodes
	// /dev/dri/renderD* and /dev/xclmgmt<instance>.
	BackendXilinx = "xilinx"
	// BackendPCI reads PCI accelerators selected by vendor and class whose
	// node is <function>/<class dir>/<name>/dev (Bertha: /dev/haN).
	BackendPCI = "pci"
)

// Backends lists the discovery backends in the order errors name them.
var Backends = []string{BackendLPU, BackendXilinx, BackendPCI}

// Defaults of the xilinx backend: AMD/Xilinx vendor, Alveo U55C user and
// management functions, the U55C shell Orion cards carry.
const (
	DefaultXilinxVendor     = "0x10ee"
	DefaultXilinxUserDevice = "0x505d"
	DefaultXilinxMgmtDevice = "0x505c"
	DefaultXilinxShell      = "xilinx_u55c_gen3x16_xdma_base_3"
)

// Defaults of the pci backend, from what is public about Bertha. The class
// directory is not public: by default every subdirectory of the function
// is scanned for <dir>/<name>/dev (PCIOptions.ClassDir).
const (
	DefaultPCIVendor = "0x1eff"
	DefaultPCIClass  = "0x120000"
)

// PCIDriverFiles are the files of Bertha's user-mode driver that go-halib's
// users expect in the container: the pci backend's default read-only
// mounts (config injection.mounts).
var PCIDriverFiles = []string{
	"/usr/local/lib/libha_driver.so",
	"/usr/local/include/ha_driver.h",
	"/usr/local/lib/pkgconfig/libha_driver.pc",
}

// Discovery selects and configures the discovery backend (the config's
// discovery section). The zero value is the lpu backend.
type Discovery struct {
	Backend string // BackendLPU ("" too), BackendXilinx or BackendPCI
	Xilinx  XilinxOptions
	PCI     PCIOptions
}

// XilinxOptions configure the xilinx backend. Empty IDs take the defaults.
type XilinxOptions struct {
	Vendor     string // PCI vendor of both functions, "0x10ee"
	UserDevice string // PCI device of the user function (xocl), "0x505d"
	MgmtDevice string // PCI device of the management function (xclmgmt), "0x505c"
	// Shell is the shell name (rom.u.*/VBNV) every card must carry; a card
	// with another is unhealthy. Empty: not checked.
	Shell string
	// NoManagementNodes leaves /dev/xclmgmt<instance> out of each LPU's
	// nodes (and a missing management function out of its health). The
	// default injects them, as the Xilinx device plugin does.
	NoManagementNodes bool
}

// PCIOptions configure the pci backend. Empty fields take the defaults
// except the health attribute, which is optional.
type PCIOptions struct {
	Vendor string // PCI vendor, "0x1eff"
	Class  string // PCI class, "0x120000" (processing accelerator)
	// ClassDir is the function's subdirectory holding the node's
	// directory. "" (default): the first subdirectory holding
	// <name>/dev, as go-halib finds it.
	ClassDir string
	// Driver is the name the node's major must be registered under in
	// /proc/devices. "" (default): the driver the function is bound to.
	Driver string
	// HealthAttribute is a file, relative to the PCI function's directory,
	// whose trimmed content must equal HealthValue for the LPU to be
	// healthy. Empty: not checked.
	HealthAttribute string
	HealthValue     string // default "1"
	// Health, when set, is asked about every LPU after the sysfs checks
	// pass: the seam a vendor library (libha_driver) plugs into.
	Health HealthChecker
}

// HealthChecker judges an LPU's health from outside sysfs, e.g. through a
// vendor library. It is given the LPU's ID and PCI address and must not
// block for long: ProbeHealth runs it every poll interval.
type HealthChecker interface {
	CheckHealth(id, pciAddress string) Health
}

// WithDiscovery selects the discovery backend and its options. Empty IDs
// take the backend's defaults.
func WithDiscovery(d Discovery) Option {
	return func(s *Sysfs) { s.disc = d.withDefaults() }
}

func (d Discovery) withDefaults() Discovery {
	set := func(p *string, v string) {
		if *p == "" {
			*p = v
		}
	}
	set(&d.Backend, BackendLPU)
	set(&d.Xilinx.Vendor, DefaultXilinxVendor)
	set(&d.Xilinx.UserDevice, DefaultXilinxUserDevice)
	set(&d.Xilinx.MgmtDevice, DefaultXilinxMgmtDevice)
	set(&d.PCI.Vendor, DefaultPCIVendor)
	set(&d.PCI.Class, DefaultPCIClass)
	set(&d.PCI.HealthValue, "1")
	for _, p := range []*string{&d.Xilinx.Vendor, &d.Xilinx.UserDevice, &d.Xilinx.MgmtDevice, &d.PCI.Vendor, &d.PCI.Class} {
		*p = strings.ToLower(*p)
	}
	return d
}

// CheckDiscovery validates a Discovery: a known backend, IDs of the form
// 0xHHHH (vendor, device) or 0xHHHHHH (class), a class directory and
// health attribute that stay inside the function's directory.
func CheckDiscovery(d Discovery) error {
	d = d.withDefaults()
	switch d.Backend {
	case BackendLPU, BackendXilinx, BackendPCI:
	default:
		return fmt.Errorf("discovery backend %q: want %s", clip(d.Backend), strings.Join(Backends, ", "))
	}
	for _, f := range []struct{ name, v string }{
		{"xilinx vendor", d.Xilinx.Vendor}, {"xilinx userDevice", d.Xilinx.UserDevice},
		{"xilinx mgmtDevice", d.Xilinx.MgmtDevice}, {"pci vendor", d.PCI.Vendor},
	} {
		if !isHexID(f.v, 4) {
			return fmt.Errorf("discovery %s %q: want 0x and 4 hex digits", f.name, clip(f.v))
		}
	}
	if !isHexID(d.PCI.Class, 6) {
		return fmt.Errorf("discovery pci class %q: want 0x and 6 hex digits", clip(d.PCI.Class))
	}
	if d.PCI.ClassDir != "" && !isPlainName(d.PCI.ClassDir) {
		return fmt.Errorf("discovery pci classDir %q: want one path element", clip(d.PCI.ClassDir))
	}
	if d.PCI.Driver != "" && !isNodeName(d.PCI.Driver) {
		return fmt.Errorf("discovery pci driver %q: want a driver name", clip(d.PCI.Driver))
	}
	if a := d.PCI.HealthAttribute; a != "" {
		for _, el := range strings.Split(a, "/") {
			if !isPlainName(el) {
				return fmt.Errorf("discovery pci healthAttribute %q: want a relative path inside the function directory", clip(a))
			}
		}
	}
	return nil
}

// isHexID reports whether s is "0x" and n lower-case hex digits.
func isHexID(s string, n int) bool {
	if len(s) != 2+n || s[:2] != "0x" {
		return false
	}
	for i := 2; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// isPlainName reports whether s is one path element, not "." or "..".
func isPlainName(s string) bool {
	return s != "" && s != "." && s != ".." && !strings.ContainsAny(s, "/\x00")
}

package config

import (
	"slices"
	"strings"

	"github.com/hyperaccel/lpu-node/pkg/device"
)

// Discovery selects how LPUs are found: our own sysfs layout (lpu), Alveo
// cards under XRT (xilinx, Orion) or PCI accelerators by vendor and class
// (pci, Bertha). The backend's section is read only when it is selected.
type Discovery struct {
	Backend string `json:"backend"` // lpu|xilinx|pci; default lpu
	Xilinx  Xilinx `json:"xilinx"`
	PCI     PCI    `json:"pci"`
}

// Xilinx configures the xilinx backend.
type Xilinx struct {
	Vendor     string `json:"vendor"`     // PCI vendor of both functions; default 0x10ee
	UserDevice string `json:"userDevice"` // PCI device of the user function (xocl); default 0x505d
	MgmtDevice string `json:"mgmtDevice"` // PCI device of the management function (xclmgmt); default 0x505c
	// Shell every card must carry (rom.u.*/VBNV); a card with another is
	// unhealthy. Default xilinx_u55c_gen3x16_xdma_base_3; "" turns the
	// check off.
	Shell *string `json:"shell"`
	// ManagementNodes injects /dev/xclmgmt<instance> next to each card's
	// render node, as the Xilinx device plugin does; default true.
	ManagementNodes *bool `json:"managementNodes"`
}

// PCI configures the pci backend.
type PCI struct {
	Vendor string `json:"vendor"` // default 0x1eff
	Class  string `json:"class"`  // default 0x120000
	// ClassDir is the function's subdirectory holding <name>/dev; default
	// "": the first subdirectory that holds one (the name is not public).
	ClassDir string `json:"classDir"`
	// Driver is the name /proc/devices must register the node's major
	// under; default "": the driver the function is bound to.
	Driver string `json:"driver"`
	// HealthAttribute is a file relative to the PCI function's directory
	// whose content must equal HealthValue; "" (default) checks none.
	HealthAttribute string `json:"healthAttribute"`
	HealthValue     string `json:"healthValue"` // default "1"
}

// Simulate is the section only lpu-nri simulate reads: the daemons do not.
type Simulate struct {
	// Backend is the layout it writes without --backend; default:
	// discovery.backend.
	Backend string `json:"backend"`
}

// applyDiscoveryDefaults fills the discovery sections.
func (c *Config) applyDiscoveryDefaults() {
	d := &c.Discovery
	setString(&d.Backend, device.BackendLPU)
	setString(&d.Xilinx.Vendor, device.DefaultXilinxVendor)
	setString(&d.Xilinx.UserDevice, device.DefaultXilinxUserDevice)
	setString(&d.Xilinx.MgmtDevice, device.DefaultXilinxMgmtDevice)
	if d.Xilinx.Shell == nil {
		s := device.DefaultXilinxShell
		d.Xilinx.Shell = &s
	}
	if d.Xilinx.ManagementNodes == nil {
		t := true
		d.Xilinx.ManagementNodes = &t
	}
	setString(&d.PCI.Vendor, device.DefaultPCIVendor)
	setString(&d.PCI.Class, device.DefaultPCIClass)
	setString(&d.PCI.HealthValue, "1")
	setString(&c.Simulate.Backend, d.Backend)
}

// defaultMounts are the injection mounts of a backend when the file names
// none: go-halib's user-mode driver on Bertha (pci), else /usr/lib/lpu.
// Host paths that do not exist are skipped at injection.
func defaultMounts(backend string) []Mount {
	paths := []string{DefaultMountPath}
	if backend == device.BackendPCI {
		paths = device.PCIDriverFiles
	}
	ms := make([]Mount, len(paths))
	for i, p := range paths {
		ms[i] = Mount{HostPath: p, ContainerPath: p}
	}
	return ms
}

// discovery checks the discovery sections.
func (v *validator) discovery(c *Config) {
	v.oneOf("discovery.backend", c.Discovery.Backend, device.Backends)
	if c.Simulate.Backend != c.Discovery.Backend { // a bad default is named once, under the field the file set
		v.oneOf("simulate.backend", c.Simulate.Backend, device.Backends)
	}
	d := c.Discovery
	for _, f := range []struct{ path, value string }{
		{"discovery.xilinx.vendor", d.Xilinx.Vendor}, {"discovery.xilinx.userDevice", d.Xilinx.UserDevice},
		{"discovery.xilinx.mgmtDevice", d.Xilinx.MgmtDevice}, {"discovery.pci.vendor", d.PCI.Vendor},
	} {
		if device.CheckDiscovery(device.Discovery{Xilinx: device.XilinxOptions{Vendor: f.value}}) != nil {
			v.add(f.path, f.value, "must be a PCI ID, 0x and 4 hex digits (e.g. \"0x10ee\")")
		}
	}
	if device.CheckDiscovery(device.Discovery{PCI: device.PCIOptions{Class: d.PCI.Class}}) != nil {
		v.add("discovery.pci.class", d.PCI.Class, "must be a PCI class, 0x and 6 hex digits (e.g. \"0x120000\")")
	}
	if device.CheckDiscovery(device.Discovery{PCI: device.PCIOptions{ClassDir: d.PCI.ClassDir}}) != nil {
		v.add("discovery.pci.classDir", d.PCI.ClassDir, "must be one directory name")
	}
	if device.CheckDiscovery(device.Discovery{PCI: device.PCIOptions{Driver: d.PCI.Driver}}) != nil {
		v.add("discovery.pci.driver", d.PCI.Driver, "must be a driver name")
	}
	if device.CheckDiscovery(device.Discovery{PCI: device.PCIOptions{HealthAttribute: d.PCI.HealthAttribute}}) != nil {
		v.add("discovery.pci.healthAttribute", d.PCI.HealthAttribute, "must be a relative path inside the PCI function's directory")
	}
	if s := d.Xilinx.Shell; s != nil && strings.ContainsAny(*s, "\x00\n") {
		v.add("discovery.xilinx.shell", *s, "must be one line of text")
	}
	if strings.ContainsAny(d.PCI.HealthValue, "\x00\n") {
		v.add("discovery.pci.healthValue", d.PCI.HealthValue, "must be one line of text")
	}
}

// DeviceDiscovery returns the discovery section as pkg/device takes it.
func (d Discovery) DeviceDiscovery() device.Discovery {
	out := device.Discovery{
		Backend: d.Backend,
		Xilinx: device.XilinxOptions{
			Vendor: d.Xilinx.Vendor, UserDevice: d.Xilinx.UserDevice, MgmtDevice: d.Xilinx.MgmtDevice,
			Shell: device.DefaultXilinxShell,
		},
		PCI: device.PCIOptions{
			Vendor: d.PCI.Vendor, Class: d.PCI.Class, ClassDir: d.PCI.ClassDir, Driver: d.PCI.Driver,
			HealthAttribute: d.PCI.HealthAttribute, HealthValue: d.PCI.HealthValue,
		},
	}
	if d.Xilinx.Shell != nil {
		out.Xilinx.Shell = *d.Xilinx.Shell
	}
	if d.Xilinx.ManagementNodes != nil {
		out.Xilinx.NoManagementNodes = !*d.Xilinx.ManagementNodes
	}
	return out
}

// DiscoveryOptions are the pkg/device options both daemons build their
// discoverer with: the backend, the topology section and the state
// directory (where the PCI backends keep their address → ID map).
func (c *Config) DiscoveryOptions() []device.Option {
	t := c.Topology
	return []device.Option{
		device.WithTopology(t.Source, slices.Clone(t.Rings), t.NetworkTable),
		device.WithStateDir(c.StateDir),
		device.WithDiscovery(c.Discovery.DeviceDiscovery()),
	}
}

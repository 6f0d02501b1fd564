package device

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// ErrNoDriver is returned (wrapped) by Discover when the class directory
// /sys/class/lpu does not exist under the root: the driver is not loaded, or
// the host's /sys is not mounted where the root says.
var ErrNoDriver = errors.New("lpu driver not loaded: no " + ClassDir)

// lpuDriver is the name the lpu driver registers its major under in
// /proc/devices.
const lpuDriver = "lpu"

// lpuBackend reads the layout this package defines: /sys/class/lpu/lpuN
// and /dev/lpuN. It keeps no state: the driver numbers the devices.
type lpuBackend struct{ *tree }

var _ backend = (*lpuBackend)(nil)

func (b *lpuBackend) discover(ctx context.Context) (*Inventory, error) {
	indexes, err := b.list()
	if err != nil {
		return nil, err
	}
	inv := &Inventory{Devices: make([]Device, 0, len(indexes))}
	for _, idx := range indexes {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		inv.Devices = append(inv.Devices, b.device(idx))
	}
	inv.DriverVersion = b.driverVersion()
	return inv, nil
}

// list returns the indexes of the lpuN entries of the class directory,
// ascending. Other entries are ignored.
func (b *lpuBackend) list() ([]int, error) {
	entries, err := os.ReadDir(b.under(ClassDir))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w: %w", ErrNoDriver, err)
		}
		return nil, fmt.Errorf("list lpu devices: %w", err)
	}
	indexes := make([]int, 0, len(entries))
	for _, e := range entries {
		idx, err := ParseID(e.Name())
		if err != nil {
			continue
		}
		indexes = append(indexes, idx)
	}
	slices.Sort(indexes)
	return indexes, nil
}

// hostAttr is the host path of one attribute of device id.
func hostAttr(id, name string) string { return ClassDir + "/" + id + "/" + name }

// device reads everything about one device. It never fails: problems become
// an unhealthy Health or, for advisory attributes, a logged warning.
func (b *lpuBackend) device(idx int) Device {
	id := ID(idx)
	d := Device{ID: id, Index: idx, Path: DevDir + "/" + id}
	d.Major, d.Minor, d.Health = b.check(id)
	d.Serial = b.textAt(id, hostAttr(id, attrSerial))
	d.Firmware = b.textAt(id, hostAttr(id, attrFirmware))
	d.Model = b.textAt(id, hostAttr(id, attrModel))
	d.NUMANode = b.numaAt(id, hostAttr(id, attrNUMA))
	d.PCIBusID = b.pciBusID(id)
	if d.PCIBusID != "" {
		d.PCIFunctions = []string{d.PCIBusID}
	}
	d.Nodes = []Node{{Path: d.Path, Major: d.Major, Minor: d.Minor}}
	return d
}

// pciBusID returns the basename of the device link when it names a PCI
// function (DDDD:BB:DD.F), else "".
func (b *lpuBackend) pciBusID(id string) string {
	target, err := os.Readlink(b.under(hostAttr(id, attrDeviceLink)))
	if err != nil {
		return ""
	}
	base := filepath.Base(target)
	if !isPCIAddress(base) {
		b.warn("ignoring device link", "device", id, "file", hostAttr(id, attrDeviceLink), "target", clip(target))
		return ""
	}
	return base
}

// isPCIAddress reports whether s has the form DDDD:BB:DD.F (hex digits).
func isPCIAddress(s string) bool {
	if len(s) != len("0000:00:00.0") || s[4] != ':' || s[7] != ':' || s[10] != '.' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if i == 4 || i == 7 || i == 10 {
			continue
		}
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// driverVersion reads /sys/module/lpu/version; "" when absent.
func (b *lpuBackend) driverVersion() string { return b.textAt("", ModuleVersion) }

func (b *lpuBackend) probe(id string) Health {
	_, _, h := b.check(id)
	return h
}

// check reads dev, status and the node of one device. Reasons name host
// paths only.
func (b *lpuBackend) check(id string) (major, minor int64, h Health) {
	var reasons []string
	devPath := hostAttr(id, attrDev)
	if v, err := readAttr(b.under(devPath)); err != nil {
		reasons = append(reasons, "dev attribute "+describeErr("read", devPath, err))
	} else if ma, mi, perr := ParseDev(v); perr != nil {
		reasons = append(reasons, fmt.Sprintf("dev attribute %s: %v", devPath, perr))
	} else {
		major, minor = ma, mi
	}

	statusPath := hostAttr(id, attrStatus)
	if v, err := readAttr(b.under(statusPath)); err != nil {
		reasons = append(reasons, "status file "+describeErr("read", statusPath, err))
	} else if v != StatusReady && v != StatusBusy {
		reasons = append(reasons, fmt.Sprintf("status %q", clip(v)))
	}

	node := DevDir + "/" + id
	known := major > 0 || minor > 0
	if err := b.checkNode(node, major, minor, known); err != nil {
		reasons = append(reasons, err.Error())
	} else if known {
		if err := b.checkMajor(node, major, lpuDriver); err != nil {
			reasons = append(reasons, err.Error())
		}
	}
	if len(reasons) == 0 {
		return major, minor, Health{Healthy: true}
	}
	return major, minor, Health{Reason: strings.Join(reasons, "; ")}
}

func (b *lpuBackend) watchPaths() []string {
	var paths []string
	class := b.under(ClassDir)
	if _, err := os.Stat(class); err == nil {
		paths = append(paths, class)
	}
	if indexes, err := b.list(); err == nil {
		for _, idx := range indexes {
			p := filepath.Join(class, ID(idx))
			if fi, err := os.Stat(p); err == nil && fi.IsDir() {
				paths = append(paths, p)
			}
		}
	}
	if _, err := os.Stat(b.under(DevDir)); err == nil {
		paths = append(paths, b.under(DevDir))
	}
	return paths
}

// indexRingWarning: the lpu layout's index order is the driver's.
func (b *lpuBackend) indexRingWarning() string { return "" }

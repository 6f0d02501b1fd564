package device

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// Host paths of the layout this package reads (see the package doc).
// Discovery reads them under its root; everything it reports uses them as
// written here.
const (
	ClassDir       = "/sys/class/lpu"
	DevDir         = "/dev"
	ModuleVersion  = "/sys/module/lpu/version"
	DefaultMajor   = 509 // the major Simulate and devicetest use by default
	attrDev        = "dev"
	attrStatus     = "status"
	attrSerial     = "serial"
	attrFirmware   = "firmware_version"
	attrModel      = "model"
	attrNUMA       = "numa_node"
	attrDeviceLink = "device"
	attrRingID     = "ring_id"
	attrRingPos    = "ring_position"
)

// ErrNoDriver is returned (wrapped) by Discover when the class directory
// /sys/class/lpu does not exist under the root: the driver is not loaded, or
// the host's /sys is not mounted where the root says.
var ErrNoDriver = errors.New("lpu driver not loaded: no " + ClassDir)

// Sysfs discovers LPUs from sysfs and devfs under a root directory: "/" on a
// host, "/host" in a container with the host mounted there, a temp dir in
// tests. Every call reads the files afresh; the only state kept is which
// warnings were already logged. Safe for concurrent use.
type Sysfs struct {
	root    string
	rings   [][]string
	table   string
	source  string
	disc    Discovery
	log     *slog.Logger
	cards   atomic.Pointer[cardIndex] // pci backends: ID → card of the last scan
	lastMap atomic.Pointer[string]    // pci backends: the address → ID map last logged

	warned  sync.Map // warning text → struct{}: each distinct warning is logged once
	nWarned atomic.Int64
}

var _ Discoverer = (*Sysfs)(nil)

// Option configures a Sysfs.
type Option func(*Sysfs)

// WithRings sets explicit rings of device IDs, each in ring order (the
// config's topology.rings). Discover validates them against what it finds.
func WithRings(rings [][]string) Option {
	return func(s *Sysfs) {
		s.rings = make([][]string, len(rings))
		for i, r := range rings {
			s.rings[i] = slices.Clone(r)
		}
	}
}

// WithNetworkTable sets the host path of the vendor network table (see the
// package documentation for its format); it is read under the root.
func WithNetworkTable(hostPath string) Option {
	return func(s *Sysfs) { s.table = hostPath }
}

// WithTopologySource forces one topology source: TopologyAuto (default),
// TopologyConfig, TopologyTable, TopologySysfs or TopologyIndex. A forced
// source whose input is absent is an error in Discover.
func WithTopologySource(src string) Option {
	return func(s *Sysfs) { s.source = src }
}

// WithLogger sets the logger for warnings about attributes that do not stop
// discovery (an unparsable numa_node, say). Default: slog.Default().
func WithLogger(l *slog.Logger) Option {
	return func(s *Sysfs) {
		if l != nil {
			s.log = l
		}
	}
}

// NewSysfs returns a discoverer reading the layout under root ("/" in
// production).
func NewSysfs(root string, opts ...Option) *Sysfs {
	if root == "" {
		root = "/"
	}
	s := &Sysfs{root: filepath.Clean(root), source: TopologyAuto, disc: Discovery{}.withDefaults(), log: slog.Default()}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Root returns the directory discovery reads under.
func (s *Sysfs) Root() string { return s.root }

// Backend returns the discovery backend: BackendLPU, BackendXilinx or
// BackendPCI.
func (s *Sysfs) Backend() string { return s.disc.Backend }

// under maps a host path to the path read under the root.
func (s *Sysfs) under(hostPath string) string { return filepath.Join(s.root, hostPath) }

// Discover enumerates <root>/sys/class/lpu/lpuN, reads each device's
// attributes and health, the driver version and the ring topology. A broken
// device is reported unhealthy, never dropped, and does not stop discovery
// of the others. Errors: the class directory is missing (wraps ErrNoDriver),
// the topology input is invalid, or ctx is done.
//
// The xilinx and pci backends read the PCI bus instead (see the package
// documentation); they fail only when /sys/bus/pci/devices is unreadable.
func (s *Sysfs) Discover(ctx context.Context) (*Inventory, error) {
	var inv *Inventory
	var err error
	switch s.disc.Backend {
	case BackendXilinx:
		inv, err = s.discoverXilinx(ctx)
	case BackendPCI:
		inv, err = s.discoverPCI(ctx)
	default:
		inv, err = s.discoverLPU(ctx)
	}
	if err != nil {
		return nil, err
	}
	inv.Backend = s.disc.Backend
	rings, err := s.topology(inv.Devices)
	if err != nil {
		return nil, err
	}
	inv.Rings = rings
	return inv, nil
}

// discoverLPU is Discover of the lpu backend, without the topology.
func (s *Sysfs) discoverLPU(ctx context.Context) (*Inventory, error) {
	indexes, err := s.list()
	if err != nil {
		return nil, err
	}
	inv := &Inventory{Devices: make([]Device, 0, len(indexes))}
	for _, idx := range indexes {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		inv.Devices = append(inv.Devices, s.device(idx))
	}
	inv.DriverVersion = s.driverVersion()
	return inv, nil
}

// list returns the indexes of the lpuN entries of the class directory,
// ascending. Other entries are ignored.
func (s *Sysfs) list() ([]int, error) {
	entries, err := os.ReadDir(s.under(ClassDir))
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
func (s *Sysfs) device(idx int) Device {
	id := ID(idx)
	d := Device{ID: id, Index: idx, Path: DevDir + "/" + id, NUMANode: -1}
	d.Major, d.Minor, d.Health = s.probe(id)
	d.Serial = s.text(id, attrSerial)
	d.Firmware = s.text(id, attrFirmware)
	d.Model = s.text(id, attrModel)
	if v, err := readAttr(s.under(hostAttr(id, attrNUMA))); err == nil {
		n, perr := parseNUMA(v)
		if perr != nil {
			s.warn("ignoring numa_node", "device", id, "file", hostAttr(id, attrNUMA), "value", clip(v), "err", perr)
		}
		d.NUMANode = n
	} else if !errors.Is(err, fs.ErrNotExist) {
		s.warn("ignoring numa_node", "device", id, "err", describeErr("read", hostAttr(id, attrNUMA), err))
	}
	d.PCIBusID = s.pciBusID(id)
	if d.PCIBusID != "" {
		d.PCIFunctions = []string{d.PCIBusID}
	}
	d.Nodes = []Node{{Path: d.Path, Major: d.Major, Minor: d.Minor}}
	return d
}

// text reads a free-text attribute; absent or unreadable is "".
func (s *Sysfs) text(id, name string) string {
	v, err := readAttr(s.under(hostAttr(id, name)))
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			s.warn("ignoring attribute", "device", id, "err", describeErr("read", hostAttr(id, name), err))
		}
		return ""
	}
	return cleanText(v)
}

// pciBusID returns the basename of the device link when it names a PCI
// function (DDDD:BB:DD.F), else "".
func (s *Sysfs) pciBusID(id string) string {
	target, err := os.Readlink(s.under(hostAttr(id, attrDeviceLink)))
	if err != nil {
		return ""
	}
	base := filepath.Base(target)
	if !isPCIAddress(base) {
		s.warn("ignoring device link", "device", id, "file", hostAttr(id, attrDeviceLink), "target", clip(target))
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
func (s *Sysfs) driverVersion() string {
	v, err := readAttr(s.under(ModuleVersion))
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			s.warn("ignoring driver version", "err", describeErr("read", ModuleVersion, err))
		}
		return ""
	}
	return cleanText(v)
}

// ProbeHealth re-reads what decides the health of one device: its dev and
// status attributes and its device node (lpu backend), or the card's
// health attributes and nodes (xilinx, pci: the card the last Discover
// gave this ID). It is cheap (a few small reads and lstats) and meant for
// periodic and event-driven re-probes. An invalid ID is unhealthy.
func (s *Sysfs) ProbeHealth(id string) Health {
	if _, err := ParseID(id); err != nil {
		return Health{Reason: err.Error()}
	}
	switch s.disc.Backend {
	case BackendXilinx:
		return s.probeXilinx(id)
	case BackendPCI:
		return s.probePCI(id)
	}
	_, _, h := s.probe(id)
	return h
}

// probe reads dev, status and the node of one device. Reasons name host
// paths only.
func (s *Sysfs) probe(id string) (major, minor int64, h Health) {
	var reasons []string
	devPath := hostAttr(id, attrDev)
	if v, err := readAttr(s.under(devPath)); err != nil {
		reasons = append(reasons, "dev attribute "+describeErr("read", devPath, err))
	} else if ma, mi, perr := ParseDev(v); perr != nil {
		reasons = append(reasons, fmt.Sprintf("dev attribute %s: %v", devPath, perr))
	} else {
		major, minor = ma, mi
	}

	statusPath := hostAttr(id, attrStatus)
	if v, err := readAttr(s.under(statusPath)); err != nil {
		reasons = append(reasons, "status file "+describeErr("read", statusPath, err))
	} else if v != StatusReady && v != StatusBusy {
		reasons = append(reasons, fmt.Sprintf("status %q", clip(v)))
	}

	node := DevDir + "/" + id
	if err := s.checkNode(node, major, minor, major > 0 || minor > 0); err != nil {
		reasons = append(reasons, err.Error())
	}
	if len(reasons) == 0 {
		return major, minor, Health{Healthy: true}
	}
	return major, minor, Health{Reason: strings.Join(reasons, "; ")}
}

// WatchPaths returns the paths, under the root, worth watching with fsnotify
// for changes: the class directory (devices appearing and going), each
// device's sysfs directory (status flips; real sysfs rarely emits inotify
// events, so callers also re-probe periodically) and the dev directory
// (device nodes). Paths that do not exist are left out.
//
// The xilinx and pci backends watch /sys/bus/pci/devices, each LPU's PCI
// function directories, /dev and (xilinx) /dev/dri.
func (s *Sysfs) WatchPaths() []string {
	if s.disc.Backend != BackendLPU {
		return s.watchPCI()
	}
	var paths []string
	class := s.under(ClassDir)
	if _, err := os.Stat(class); err == nil {
		paths = append(paths, class)
	}
	if indexes, err := s.list(); err == nil {
		for _, idx := range indexes {
			p := filepath.Join(class, ID(idx))
			if fi, err := os.Stat(p); err == nil && fi.IsDir() {
				paths = append(paths, p)
			}
		}
	}
	if _, err := os.Stat(s.under(DevDir)); err == nil {
		paths = append(paths, s.under(DevDir))
	}
	return paths
}

// maxWarned bounds the memory of warnings already given.
const maxWarned = 1024

// warn logs a warning about the node's files once per distinct message and
// attributes (Discover runs every few seconds; a persistent oddity is not
// news every time), and at debug level after that.
func (s *Sysfs) warn(msg string, args ...any) {
	key := msg + fmt.Sprint(args...)
	if _, seen := s.warned.Load(key); seen || s.nWarned.Load() >= maxWarned {
		s.log.Debug(msg, args...)
		return
	}
	if _, seen := s.warned.LoadOrStore(key, struct{}{}); seen {
		s.log.Debug(msg, args...)
		return
	}
	s.nWarned.Add(1)
	s.log.Warn(msg, args...)
}

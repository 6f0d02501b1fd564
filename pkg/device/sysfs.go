package device

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
)

// Host paths of the layout this package reads (see the package doc).
// Discovery reads them under its root; everything it reports uses them as
// written here.
const (
	ClassDir       = "/sys/class/lpu"
	DevDir         = "/dev"
	ModuleVersion  = "/sys/module/lpu/version"
	DefaultMajor   = 509 // the major devicesim and devicetest use by default
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

// Sysfs discovers LPUs from sysfs and devfs under a root directory: "/" on a
// host, "/host" in a container with the host mounted there, a temp dir in
// tests. Every call reads the files afresh; the state kept is which
// warnings were already logged and, for the PCI backends, the cards of the
// last scan and the IDs given to card addresses. Safe for concurrent use.
type Sysfs struct {
	*tree
	rings    [][]string
	table    string
	source   string
	disc     Discovery
	stateDir string
	b        backend
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

// WithStateDir sets the directory (a host path of the daemon, not under
// the root) where the PCI backends persist the address → ID map that keeps
// IDs stable across restarts (device-ids-<backend>.json). Without one the
// map lives only as long as the Sysfs.
func WithStateDir(dir string) Option {
	return func(s *Sysfs) { s.stateDir = dir }
}

// TreeMarker is the file (a host path under the root) that marks a
// self-contained tree: devicesim (lpu-nri simulate) and devicetest write
// it into every tree they write.
// Under a marked root a regular file may stand in for a device node, and
// the node's own host paths are the tree's (TreePath).
const TreeMarker = "/.lpu-simulated-node"

// IsMarkedTree reports whether root carries the TreeMarker (lstat:
// a link does not count). It never holds for "/": a marked tree always
// has a directory of its own, and a file on a real host must not turn
// that host's device nodes into optional ones.
func IsMarkedTree(root string) bool {
	root = filepath.Clean(cmp.Or(root, "/"))
	if root == "/" {
		return false
	}
	fi, err := os.Lstat(filepath.Join(root, TreeMarker))
	return err == nil && fi.Mode().IsRegular()
}

// TreePath returns root joined with the node's host path p, and true, when
// root is a marked self-contained tree (IsMarkedTree): its driver files
// and feature dir live inside it, and its path is the same on the host as
// here (unlike a host root mounted at /host). Otherwise it returns "",
// false: p is the host's own.
func TreePath(root, p string) (string, bool) {
	if !IsMarkedTree(root) {
		return "", false
	}
	return filepath.Join(root, p), true
}

// NewSysfs returns a discoverer reading the layout under root ("/" in
// production).
func NewSysfs(root string, opts ...Option) *Sysfs {
	if root == "" {
		root = "/"
	}
	root = filepath.Clean(root)
	s := &Sysfs{tree: &tree{root: root, log: slog.Default()}, source: TopologyAuto, disc: Discovery{}.withDefaults()}
	for _, o := range opts {
		o(s)
	}
	s.standIns = IsMarkedTree(root)
	s.b = newBackend(s.tree, s.disc, s.stateDir)
	return s
}

// Root returns the directory discovery reads under.
func (s *Sysfs) Root() string { return s.root }

// Backend returns the discovery backend: BackendLPU, BackendXilinx or
// BackendPCI.
func (s *Sysfs) Backend() string { return s.disc.Backend }

// Discover enumerates the LPUs of the backend, reads each one's attributes
// and health and the driver version, then resolves the ring topology. A
// broken device is reported unhealthy, never dropped, and does not stop
// discovery of the others.
//
// The lpu backend reads <root>/sys/class/lpu/lpuN and fails when the class
// directory is missing (wraps ErrNoDriver). The xilinx and pci backends
// read the PCI bus instead (see the package documentation); they fail only
// when /sys/bus/pci/devices is unreadable. Every backend fails when the
// topology input is invalid or ctx is done.
func (s *Sysfs) Discover(ctx context.Context) (*Inventory, error) {
	inv, err := s.b.discover(ctx)
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

// ProbeHealth re-reads what decides the health of one device: its dev and
// status attributes and its device node (lpu backend), or the card's
// health attributes and nodes (xilinx, pci: the card the last Discover
// gave this ID). It is cheap (a few small reads and lstats) and meant for
// periodic and event-driven re-probes. An invalid ID is unhealthy.
func (s *Sysfs) ProbeHealth(id string) Health {
	if _, err := ParseID(id); err != nil {
		return Health{Reason: err.Error()}
	}
	return s.b.probe(id)
}

// WatchPaths returns the paths, under the root, worth watching with fsnotify
// for changes: the class directory (devices appearing and going), each
// device's sysfs directory (status flips; real sysfs rarely emits inotify
// events, so callers also re-probe periodically) and the dev directory
// (device nodes). Paths that do not exist are left out.
//
// The xilinx and pci backends watch /sys/bus/pci/devices, each LPU's PCI
// function directories, /dev and (xilinx) /dev/dri.
func (s *Sysfs) WatchPaths() []string { return s.b.watchPaths() }

// Telemetry reads the telemetry attributes of one device. Files that do not
// exist are listed (by file name) in Telemetry.Missing and leave their field
// zero. An unreadable or unparsable file is an error naming its host path
// and value; the fields that did parse are still returned alongside it. A
// device whose sysfs directory does not exist is an error.
//
// The xilinx backend reads temperature and power from the card's xmc.u.*
// (or hwmon) files and the memory total from the model; utilisation and
// memory used have no sysfs source there and are always Missing, so
// metrics leave them out rather than report a made-up zero. The pci
// backend reports everything Missing (Bertha reads telemetry through the
// vendor library).
func (s *Sysfs) Telemetry(id string) (Telemetry, error) {
	if _, err := ParseID(id); err != nil {
		return Telemetry{}, err
	}
	return s.b.telemetry(id)
}

// checkSource reports an unknown topology source.
func checkSource(src string) error {
	return fmt.Errorf("topology source %q: want %s, %s, %s, %s or %s",
		clip(src), TopologyAuto, TopologyConfig, TopologyTable, TopologySysfs, TopologyIndex)
}

package inject

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/hyperaccel/lpu-node/pkg/device"
)

// Environment variables a container holding LPUs sees.
const (
	// EnvVisibleDevices lists the device indices in ring order, "7,0,1", or
	// VisibleNone for a container without an allocation.
	EnvVisibleDevices = "LPU_VISIBLE_DEVICES"
	// EnvNumDevices is the number of LPUs the container holds, "4": what
	// HyperDex applications read to pick how many LPUs to use. Set next to
	// EnvVisibleDevices for every container holding LPUs.
	EnvNumDevices = "NUM_LPU_DEVICES"
	// EnvDriverVersion is the host driver version, when known.
	EnvDriverVersion = "LPU_DRIVER_VERSION"
	// VisibleNone is EnvVisibleDevices for a container holding no LPU. It
	// overrides any value the image brings (NRI v0.12 drops env removals).
	VisibleNone = "none"
)

// Device node and mount constants shared by both renderers.
const (
	// DeviceType is the type of every LPU node: character device.
	DeviceType = "c"
	// DeviceFileMode is the mode of the node inside the container. Access
	// control is the device cgroup, which only admits allocated nodes.
	DeviceFileMode uint32 = 0o666
	// MountType is the type of every mount: a bind mount.
	MountType = "bind"
)

// MountOptions are the options of every mount: read-only recursive bind,
// no setuid, no device nodes, private propagation. Both the NRI adjustment
// and the CDI spec use them, so both runtimes build the same mount.
func MountOptions() []string { return []string{"ro", "nosuid", "nodev", "rbind", "rprivate"} }

// DeviceNode is one device node to create in the container.
type DeviceNode struct {
	Path     string // host path, also the container path: "/dev/lpu3"
	Type     string // "c"
	Major    int64
	Minor    int64
	FileMode uint32 // permission bits, 0666
}

// Mount is one host path bind-mounted read-only into the container.
type Mount struct {
	HostPath      string
	ContainerPath string // empty means HostPath
}

// Options are the node-wide parts of the edits, from config.
type Options struct {
	Mounts []Mount           // driver libraries and tools
	Env    map[string]string // extra env for every LPU container
}

// Edits is the one model of what a container holding LPUs gets. lpu-nri
// renders it as an NRI adjustment (cmd/lpu-nri/internal/nriedit); Spec
// renders the same helpers' output as a CDI spec.
type Edits struct {
	DeviceNodes []DeviceNode // ring order; each LPU's nodes together, primary first
	Mounts      []Mount      // config order, ContainerPath filled in
	Env         []string     // KEY=VALUE: LPU_VISIBLE_DEVICES, NUM_LPU_DEVICES, LPU_DRIVER_VERSION, then Options.Env by key
}

// ForDevices returns the edits for devs, which must be in ring order (arc
// start first); paths and numbers come from discovery. Every node of each
// LPU is added (device.Device.NodeList: on Orion the render node, then the
// management node), LPU by LPU. Env is LPU_VISIBLE_DEVICES with the
// indices in that order, NUM_LPU_DEVICES with their count,
// LPU_DRIVER_VERSION when driverVersion is known, then opts.Env sorted by
// key.
//
// opts.Env can never override LPU_VISIBLE_DEVICES or NUM_LPU_DEVICES (the
// keys are skipped; config validation rejects the first earlier). It may set LPU_DRIVER_VERSION only
// when the driver does not report one. Keys that are not valid environment
// names are skipped too.
//
// With no devices it returns Unallocated(): no mounts, LPU_VISIBLE_DEVICES
// none.
func ForDevices(devs []device.Device, driverVersion string, opts Options) Edits {
	if len(devs) == 0 {
		return Unallocated()
	}
	e := Edits{
		DeviceNodes: make([]DeviceNode, 0, len(devs)*len(devs[0].NodeList())),
		Mounts:      mounts(opts.Mounts),
	}
	var vis strings.Builder
	vis.Grow(len(EnvVisibleDevices) + 1 + 3*len(devs))
	vis.WriteString(EnvVisibleDevices)
	vis.WriteByte('=')
	for i, d := range devs {
		e.DeviceNodes = appendNodes(e.DeviceNodes, &d)
		if i > 0 {
			vis.WriteByte(',')
		}
		vis.WriteString(strconv.Itoa(d.Index))
	}
	e.Env = make([]string, 0, 3+len(opts.Env))
	e.Env = append(e.Env, vis.String(), EnvNumDevices+"="+strconv.Itoa(len(devs)))
	e.Env = append(e.Env, commonEnv(driverVersion, opts.Env)...)
	return e
}

// VisibleDevices returns the LPU_VISIBLE_DEVICES value for ids in ring
// order: their indices, "7,0,1". The device plugin uses it in CDI mode,
// where it returns the variable as a plain env (see Spec).
func VisibleDevices(ids []string) (string, error) {
	var b strings.Builder
	for i, id := range ids {
		n, err := device.ParseID(id)
		if err != nil {
			return "", err
		}
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(n))
	}
	return b.String(), nil
}

// AllocationEnv returns the env a container holding ids (ring order) gets
// from the device plugin in CDI mode, where CDI cannot carry it:
// LPU_VISIBLE_DEVICES (VisibleDevices) and NUM_LPU_DEVICES.
func AllocationEnv(ids []string) (map[string]string, error) {
	visible, err := VisibleDevices(ids)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", EnvVisibleDevices, err)
	}
	return map[string]string{EnvVisibleDevices: visible, EnvNumDevices: strconv.Itoa(len(ids))}, nil
}

// Unallocated returns the edits for a container without a valid allocation:
// no device nodes, no mounts, only LPU_VISIBLE_DEVICES=none.
func Unallocated() Edits {
	return Edits{Env: []string{EnvVisibleDevices + "=" + VisibleNone}}
}

// appendNodes appends every device node of d, primary first.
func appendNodes(dst []DeviceNode, d *device.Device) []DeviceNode {
	for _, n := range d.NodeList() {
		dst = append(dst, DeviceNode{Path: n.Path, Type: DeviceType, Major: n.Major, Minor: n.Minor, FileMode: DeviceFileMode})
	}
	return dst
}

// mounts copies ms, filling in ContainerPath and cleaning both paths.
func mounts(ms []Mount) []Mount {
	if len(ms) == 0 {
		return nil
	}
	out := make([]Mount, 0, len(ms))
	for _, m := range ms {
		if m.HostPath == "" {
			continue
		}
		if m.ContainerPath == "" {
			m.ContainerPath = m.HostPath
		}
		m.HostPath, m.ContainerPath = filepath.Clean(m.HostPath), filepath.Clean(m.ContainerPath)
		out = append(out, m)
	}
	return out
}

// commonEnv is the env every LPU container gets besides
// LPU_VISIBLE_DEVICES: the driver version, then extra sorted by key.
func commonEnv(driverVersion string, extra map[string]string) []string {
	env := make([]string, 0, 1+len(extra))
	if driverVersion != "" {
		env = append(env, EnvDriverVersion+"="+driverVersion)
	}
	if len(extra) == 0 {
		return env
	}
	keys := make([]string, 0, len(extra))
	for k := range extra {
		if !ValidEnvKey(k) || k == EnvVisibleDevices || k == EnvNumDevices || (k == EnvDriverVersion && driverVersion != "") {
			continue
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		env = append(env, k+"="+extra[k])
	}
	return env
}

// ValidEnvKey reports whether k is a portable environment variable name:
// a letter or underscore, then letters, digits or underscores.
func ValidEnvKey(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		switch {
		case c == '_', 'A' <= c && c <= 'Z', 'a' <= c && c <= 'z':
		case '0' <= c && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// ExistingMounts splits ms into the mounts whose host path exists under
// root (the discovery root, "/" on a node) and the host paths that do not.
// A bind mount of a missing source makes the runtime fail the container,
// so a daemon drops missing ones (and logs them) rather than breaking every
// LPU container on a node without, say, /usr/lib/lpu.
func ExistingMounts(root string, ms []Mount) (kept []Mount, missing []string) {
	for _, m := range ms {
		if _, err := os.Stat(filepath.Join(root, m.HostPath)); err != nil {
			missing = append(missing, m.HostPath)
			continue
		}
		kept = append(kept, m)
	}
	return kept, missing
}

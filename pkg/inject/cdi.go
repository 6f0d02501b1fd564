package inject

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"

	"tags.cncf.io/container-device-interface/pkg/cdi"
	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/hyperaccel/lpu-node/internal/atomicfile"
	"github.com/hyperaccel/lpu-node/pkg/device"
)

// CDI names.
const (
	// CDIKind is the CDI kind (vendor/class) of every LPU device.
	CDIKind = "hyperaccel.ai/lpu"
	// CDIAllDevice names the CDI device holding every LPU of the node.
	CDIAllDevice = "all"
	// SpecFileName is the spec's file name in the CDI spec directory.
	SpecFileName = "hyperaccel.ai-lpu.json"
)

// ErrNoDevices is returned by Spec for an inventory without devices: CDI
// rejects a spec without devices, so the caller should RemoveSpec instead.
var ErrNoDevices = errors.New("inventory has no lpu devices")

// Spec renders the node's inventory as a CDI spec of kind CDIKind:
//
//   - one device per LPU, named by its ID ("lpu3"), holding its device
//     nodes, primary first (two on Orion: render and management node); an
//     unhealthy LPU whose nodes could not be found has no device;
//   - a device "all" holding every node, ring by ring in ring order;
//   - spec-wide containerEdits with the driver mounts, LPU_DRIVER_VERSION
//     (when known) and opts.Env, applied once when any LPU is requested.
//
// No CDI device sets LPU_VISIBLE_DEVICES, not even "all": CDI replaces
// same-key env per device, so a per-device value would leave only the last
// device's index. In CDI mode the device plugin returns LPU_VISIBLE_DEVICES
// for the whole set as a plain env, the one source of truth for every
// request, "all" included.
//
// cdiVersion is the lowest version the spec needs, from the CDI library
// (0.4.0 for the mount type), so older runtimes (podman 4.3 reads ≤ 0.5.0)
// accept it.
func Spec(inv *device.Inventory, opts Options) (*specs.Spec, error) {
	if inv == nil || len(inv.Devices) == 0 {
		return nil, ErrNoDevices
	}
	s := &specs.Spec{
		Kind:    CDIKind,
		Devices: make([]specs.Device, 0, len(inv.Devices)+1),
	}
	byID := make(map[string]device.Device, len(inv.Devices))
	for _, d := range inv.Devices {
		byID[d.ID] = d
		nodes := cdiNodes(nil, &d)
		if len(nodes) == 0 {
			continue // CDI rejects a device without edits
		}
		s.Devices = append(s.Devices, specs.Device{
			Name:           d.ID,
			ContainerEdits: specs.ContainerEdits{DeviceNodes: nodes},
		})
	}
	if len(s.Devices) == 0 {
		return nil, ErrNoDevices
	}
	all := specs.Device{Name: CDIAllDevice}
	placed := make(map[string]bool, len(inv.Devices))
	for _, ring := range inv.Rings {
		for _, id := range ring {
			d, ok := byID[id]
			if !ok || placed[id] {
				continue
			}
			placed[id] = true
			all.ContainerEdits.DeviceNodes = cdiNodes(all.ContainerEdits.DeviceNodes, &d)
		}
	}
	for _, d := range inv.Devices { // devices on no ring (should not happen) still belong to "all"
		if !placed[d.ID] {
			all.ContainerEdits.DeviceNodes = cdiNodes(all.ContainerEdits.DeviceNodes, &d)
		}
	}
	s.Devices = append(s.Devices, all)
	s.ContainerEdits.Env = commonEnv(inv.DriverVersion, opts.Env)
	for _, m := range mounts(opts.Mounts) {
		s.ContainerEdits.Mounts = append(s.ContainerEdits.Mounts, &specs.Mount{
			HostPath:      m.HostPath,
			ContainerPath: m.ContainerPath,
			Type:          MountType,
			Options:       MountOptions(),
		})
	}
	v, err := specs.MinimumRequiredVersion(s)
	if err != nil {
		return nil, fmt.Errorf("cdi spec version: %w", err)
	}
	s.Version = v
	return s, nil
}

// cdiNodes appends the CDI device nodes of every node of d, primary first.
func cdiNodes(dst []*specs.DeviceNode, d *device.Device) []*specs.DeviceNode {
	for _, n := range appendNodes(nil, d) {
		dst = append(dst, cdiNode(n))
	}
	return dst
}

func cdiNode(n DeviceNode) *specs.DeviceNode {
	mode := fs.FileMode(n.FileMode)
	return &specs.DeviceNode{Path: n.Path, Type: n.Type, Major: n.Major, Minor: n.Minor, FileMode: &mode}
}

// CDIDeviceNames returns the fully qualified CDI names of ids, in order:
// "hyperaccel.ai/lpu=lpu3".
func CDIDeviceNames(ids []string) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = CDIKind + "=" + id
	}
	return out
}

// WriteSpec writes spec as dir/SpecFileName (WriteSpecFile: validated by
// the CDI library, written durably through atomicfile). When
// the file already holds the same spec it touches nothing and returns
// changed=false, so runtimes watching the directory see no event.
func WriteSpec(dir string, spec *specs.Spec) (changed bool, err error) {
	return WriteNamedSpec(dir, SpecFileName, spec)
}

// WriteNamedSpec is WriteSpec for the file dir/name (the guard's spec).
func WriteNamedSpec(dir, name string, spec *specs.Spec) (changed bool, err error) {
	if spec == nil {
		return false, errors.New("write cdi spec: nil spec")
	}
	path := filepath.Join(dir, name)
	same, err := sameSpec(path, spec)
	if err != nil {
		return false, err
	}
	if same {
		return false, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, fmt.Errorf("create cdi spec dir %s: %w", dir, err)
	}
	if err := WriteSpecFile(path, spec); err != nil {
		return false, err
	}
	return true, nil
}

// WriteSpecFile writes spec as JSON to path (mode 0600, as the CDI
// library's own writer makes it) through atomicfile: the CDI library
// parses and validates the complete temp file (cdi.ReadSpec, the check a
// runtime applies when it loads the spec) before it is renamed into place,
// so the bytes validated are the bytes installed, and the write is durable.
// An invalid spec leaves the old file untouched.
func WriteSpecFile(path string, spec *specs.Spec) error {
	data, err := json.Marshal(spec)
	if err != nil {
		return fmt.Errorf("write cdi spec %s: encode: %w", path, err)
	}
	err = atomicfile.Write(path, data, atomicfile.WithVerify(func(tmp string) error {
		_, err := cdi.ReadSpec(tmp, 0)
		return err
	}))
	if err != nil {
		return fmt.Errorf("cdi spec: %w", err)
	}
	return nil
}

// sameSpec reports whether path holds exactly spec (compared as JSON
// values, so formatting does not matter).
func sameSpec(path string, spec *specs.Spec) (bool, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read cdi spec %s: %w", path, err)
	}
	want, err := json.Marshal(spec)
	if err != nil {
		return false, fmt.Errorf("encode cdi spec: %w", err)
	}
	if bytes.Equal(bytes.TrimSpace(data), want) {
		return true, nil
	}
	var have, wantV any
	if json.Unmarshal(data, &have) != nil { // unreadable file: rewrite it
		return false, nil
	}
	if err := json.Unmarshal(want, &wantV); err != nil {
		return false, fmt.Errorf("decode cdi spec: %w", err)
	}
	return reflect.DeepEqual(have, wantV), nil
}

// RemoveSpec removes dir/SpecFileName; a missing file is not an error.
func RemoveSpec(dir string) error {
	path := filepath.Join(dir, SpecFileName)
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove cdi spec %s: %w", path, err)
	}
	return nil
}

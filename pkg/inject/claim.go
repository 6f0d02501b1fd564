package inject

import (
	"fmt"

	specs "tags.cncf.io/container-device-interface/specs-go"
)

// Driver is the node stack's one DRA identity: lpu-dra's driver name (its
// kubelet registration socket, plugin dir and ResourceSlices), the domain
// of the published device attributes and taints, and the CDI vendor of the
// per-claim specs.
const Driver = "lpu.hyperaccel.ai"

// CDI names of the DRA driver's per-claim specs.
const (
	// ClaimClass with Driver as the vendor makes the CDI kind of a
	// claim's device.
	ClaimClass = "claim"
	// ClaimKind is the CDI kind of every claim device: a container whose
	// CDI devices include ClaimKind + "=<claim UID>" got its LPUs from a
	// claim lpu-dra prepared.
	ClaimKind = Driver + "/" + ClaimClass
)

// ClaimDeviceID is the fully qualified CDI device of a claim,
// "lpu.hyperaccel.ai/claim=<uid>".
func ClaimDeviceID(claimUID string) string { return ClaimKind + "=" + claimUID }

// ClaimSpec renders e (from ForDevices, in ring order) as the CDI spec of
// one claim: one device named after the claim UID holding the device
// nodes, the read-only mounts and the env, LPU_VISIBLE_DEVICES included —
// one device per claim, so no other device's env can replace it. The
// cdiVersion is the lowest the spec needs.
func ClaimSpec(claimUID string, e Edits) (*specs.Spec, error) {
	if claimUID == "" {
		return nil, fmt.Errorf("claim cdi spec: empty claim uid")
	}
	if len(e.DeviceNodes) == 0 {
		return nil, fmt.Errorf("claim %s cdi spec: no devices", claimUID)
	}
	d := specs.Device{Name: claimUID}
	for _, n := range e.DeviceNodes {
		d.ContainerEdits.DeviceNodes = append(d.ContainerEdits.DeviceNodes, cdiNode(n))
	}
	for _, m := range e.Mounts {
		d.ContainerEdits.Mounts = append(d.ContainerEdits.Mounts, &specs.Mount{
			HostPath: m.HostPath, ContainerPath: m.ContainerPath, Type: MountType, Options: MountOptions(),
		})
	}
	d.ContainerEdits.Env = append([]string(nil), e.Env...)
	s := &specs.Spec{Kind: ClaimKind, Devices: []specs.Device{d}}
	v, err := specs.MinimumRequiredVersion(s)
	if err != nil {
		return nil, fmt.Errorf("claim %s cdi spec version: %w", claimUID, err)
	}
	s.Version = v
	return s, nil
}

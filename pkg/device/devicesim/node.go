package devicesim

import (
	"fmt"
	"path/filepath"
)

// CheckCount checks a --simulate value: 0 (real hardware) to
// MaxDevices.
func CheckCount(n int) error {
	if n < 0 || n > MaxDevices {
		return fmt.Errorf("simulate %d: want 0 to %d", n, MaxDevices)
	}
	return nil
}

// SpecFor is the node --simulate n asks for: n LPUs in rings of 8 (at
// least one ring), the ring count lowered until it divides n so all rings
// are equal. Both daemons use it, so they simulate the same node.
func SpecFor(n int) Spec {
	return Spec{Devices: n, Rings: ringsFor(n)}
}

func ringsFor(n int) int {
	r := max(n/8, 1)
	for n%r != 0 {
		r--
	}
	return r
}

// WriteNode writes the simulated node of n LPUs (SpecFor) in backend's
// layout (device.BackendLPU, device.BackendXilinx or device.BackendPCI; ""
// is device.BackendLPU) at Root(stateDir) and returns that root, the
// discovery root a daemon run with --simulate n uses. It is idempotent
// like Write.
func WriteNode(stateDir string, n int, backend string) (root string, err error) {
	root = Root(stateDir)
	spec := SpecFor(n)
	spec.Backend = backend
	if err := Write(root, spec); err != nil {
		return "", fmt.Errorf("simulate %d LPUs: %w", n, err)
	}
	return root, nil
}

// Root is the discovery root of the simulated node a daemon run with
// --simulate uses: <stateDir>/simulated-node.
func Root(stateDir string) string { return filepath.Join(stateDir, "simulated-node") }

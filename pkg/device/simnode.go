package device

import "fmt"

// CheckSimulate checks a --simulate value: 0 (real hardware) to
// MaxSimDevices.
func CheckSimulate(n int) error {
	if n < 0 || n > MaxSimDevices {
		return fmt.Errorf("simulate %d: want 0 to %d", n, MaxSimDevices)
	}
	return nil
}

// SimSpecFor is the node --simulate n asks for: n LPUs in rings of 8 (at
// least one ring), the ring count lowered until it divides n so all rings
// are equal. Both daemons use it, so they simulate the same node.
func SimSpecFor(n int) SimSpec {
	return SimSpec{Devices: n, Rings: simRings(n)}
}

func simRings(n int) int {
	r := max(n/8, 1)
	for n%r != 0 {
		r--
	}
	return r
}

// SimulateBackendNode writes the simulated node of n LPUs (SimSpecFor) in
// backend's layout (BackendLPU, BackendXilinx or BackendPCI; "" is
// BackendLPU) at SimulatedRoot(stateDir) and returns that root, the
// discovery root a daemon run with --simulate n uses. It is idempotent like
// Simulate.
func SimulateBackendNode(stateDir string, n int, backend string) (root string, err error) {
	root = SimulatedRoot(stateDir)
	spec := SimSpecFor(n)
	spec.Backend = backend
	if err := Simulate(root, spec); err != nil {
		return "", fmt.Errorf("simulate %d LPUs: %w", n, err)
	}
	return root, nil
}

package device

// Test-only helpers: shorthands the tests and fuzz targets use that no
// daemon needs (deadcode keeps production free of them).

import "fmt"

// SimulateNode writes the simulated node of n LPUs (SimSpecFor) at
// SimulatedRoot(stateDir) and returns that root, the discovery root a
// daemon run with --simulate n uses. It is idempotent like Simulate.
func SimulateNode(stateDir string, n int) (root string, err error) {
	root = SimulatedRoot(stateDir)
	if err := Simulate(root, SimSpecFor(n)); err != nil {
		return "", fmt.Errorf("simulate %d LPUs: %w", n, err)
	}
	return root, nil
}

// SimXilinxRings are the rings, as LPU IDs, of the simulated Orion node
// with this many devices and rings (what its network table describes), in
// the canonical order discovery returns: each from its first card toward
// its lower-indexed neighbour (0 1 3 5 7 6 4 2 for a ring of eight).
func SimXilinxRings(devices, rings int) [][]string {
	per := devices / rings
	out := make([][]string, rings)
	for r := range out {
		order := simRingOrder(per)
		out[r] = append(out[r], ID(r*per+order[0]))
		for i := len(order) - 1; i > 0; i-- {
			out[r] = append(out[r], ID(r*per+order[i]))
		}
	}
	return out
}

// Line returns the first line of the table that names id, or 0.
func (t *NetworkTable) Line(id string) int { return t.lines[id] }

// ParseNetworkTable parses a network table (format in the package
// documentation) whose tokens are LPU IDs. name is the table's host path,
// used in errors; every error about a line names that line. On success
// every LPU in the table is on exactly one ring and consecutive LPUs of a
// ring (and its last and first) are linked in the table.
func ParseNetworkTable(name string, data []byte) (*NetworkTable, error) {
	return ParseNetworkTableFunc(name, data, func(tok string) (int, error) {
		idx, err := ParseID(tok)
		if err != nil {
			return 0, fmt.Errorf("%q is not an LPU ID (want %sN)", clip(tok), IDPrefix)
		}
		return idx, nil
	})
}

package device

// Test-only helpers: shorthands the tests and fuzz targets use that no
// daemon needs (deadcode keeps production free of them).

import "fmt"

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

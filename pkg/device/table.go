package device

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
)

// MaxTableBytes bounds the network table file.
const MaxTableBytes = 1 << 20

// DefaultNetworkTable is where Simulate writes its network table; a real
// node may keep the vendor's export anywhere (config topology.networkTable).
const DefaultNetworkTable = "/etc/lpu/network.table"

// NetworkTable is a parsed vendor network table: the rings its links form,
// in canonical order (see the package documentation).
type NetworkTable struct {
	Rings [][]string
	lines map[string]int
}

// Line returns the first line of the table that names id, or 0.
func (t *NetworkTable) Line(id string) int { return t.lines[id] }

type link struct{ peer, line int }

// ParseNetworkTable parses a network table (format in the package
// documentation). name is the table's host path, used in errors; every
// error about a line names that line. On success every LPU in the table is
// on exactly one ring and consecutive LPUs of a ring (and its last and first)
// are linked in the table.
func ParseNetworkTable(name string, data []byte) (*NetworkTable, error) {
	if len(data) > MaxTableBytes {
		return nil, fmt.Errorf("network table %s: larger than %d bytes", name, MaxTableBytes)
	}
	lineErr := func(line int, format string, args ...any) error {
		return fmt.Errorf("network table %s line %d: %s", name, line, fmt.Sprintf(format, args...))
	}
	adj := map[int][]link{}
	alone := map[int]int{}   // index → line of its standalone entry
	seen := map[[2]int]int{} // link (low, high) → line
	first := map[string]int{}
	note := func(idx, line int) {
		if _, ok := first[ID(idx)]; !ok {
			first[ID(idx)] = line
		}
	}
	lineNo := 0
	for len(data) > 0 {
		lineNo++
		var raw []byte
		raw, data, _ = bytes.Cut(data, []byte("\n"))
		text := string(raw)
		if i := strings.IndexByte(text, '#'); i >= 0 {
			text = text[:i]
		}
		fields := strings.Fields(text)
		if len(fields) > 2 {
			return nil, lineErr(lineNo, "want one link \"lpuA lpuB\" or one LPU alone, got %d fields", len(fields))
		}
		ids := make([]int, 0, 2)
		for _, f := range fields {
			idx, err := ParseID(f)
			if err != nil {
				return nil, lineErr(lineNo, "%q is not an LPU ID (want %sN)", clip(f), IDPrefix)
			}
			ids = append(ids, idx)
		}
		switch len(ids) {
		case 0:
			continue
		case 1:
			a := ids[0]
			if l, ok := alone[a]; ok {
				return nil, lineErr(lineNo, "%s listed alone twice (first on line %d)", ID(a), l)
			}
			if ls := adj[a]; len(ls) > 0 {
				return nil, lineErr(lineNo, "%s listed alone but linked on line %d", ID(a), ls[0].line)
			}
			alone[a] = lineNo
			note(a, lineNo)
		case 2:
			a, b := ids[0], ids[1]
			if a == b {
				return nil, lineErr(lineNo, "%s linked to itself", ID(a))
			}
			key := [2]int{min(a, b), max(a, b)}
			if l, ok := seen[key]; ok {
				return nil, lineErr(lineNo, "duplicate link %s %s (first on line %d)", ID(a), ID(b), l)
			}
			for _, x := range []int{a, b} {
				if l, ok := alone[x]; ok {
					return nil, lineErr(lineNo, "%s linked but listed alone on line %d", ID(x), l)
				}
				if ls := adj[x]; len(ls) == 2 {
					return nil, lineErr(lineNo, "%s has a third link (already linked to %s on line %d and %s on line %d)",
						ID(x), ID(ls[0].peer), ls[0].line, ID(ls[1].peer), ls[1].line)
				}
			}
			seen[key] = lineNo
			adj[a] = append(adj[a], link{b, lineNo})
			adj[b] = append(adj[b], link{a, lineNo})
			note(a, lineNo)
			note(b, lineNo)
		}
	}

	all := make([]int, 0, len(adj)+len(alone))
	for idx := range adj {
		all = append(all, idx)
	}
	for idx := range alone {
		all = append(all, idx)
	}
	if len(all) == 0 {
		return nil, fmt.Errorf("network table %s: no links", name)
	}
	slices.Sort(all)

	// A single link is a ring only when both ends have no other link.
	for _, idx := range all {
		ls := adj[idx]
		if len(ls) == 1 && len(adj[ls[0].peer]) != 1 {
			return nil, lineErr(ls[0].line, "%s has only one link (to %s): links must close a ring", ID(idx), ID(ls[0].peer))
		}
	}

	visited := make(map[int]bool, len(all))
	var rings [][]string
	for _, start := range all {
		if visited[start] {
			continue
		}
		ls := adj[start]
		ring := []string{ID(start)}
		visited[start] = true
		switch len(ls) {
		case 0: // alone: a ring of one
		case 1: // an isolated pair: a ring of two
			ring = append(ring, ID(ls[0].peer))
			visited[ls[0].peer] = true
		default:
			prev, cur := start, min(ls[0].peer, ls[1].peer)
			for steps := 0; cur != start; steps++ {
				if steps > len(all) {
					// Unreachable: every LPU here has two distinct links.
					return nil, fmt.Errorf("network table %s: links around %s do not form a ring", name, ID(start))
				}
				ring = append(ring, ID(cur))
				visited[cur] = true
				next := adj[cur][0].peer
				if next == prev {
					next = adj[cur][1].peer
				}
				prev, cur = cur, next
			}
		}
		rings = append(rings, ring)
	}
	return &NetworkTable{Rings: rings, lines: first}, nil
}

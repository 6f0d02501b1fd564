package device

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
)

// MaxTableBytes bounds the network table file.
const MaxTableBytes = 1 << 20

// DefaultNetworkTable is where devicesim writes its network table; a real
// node may keep the vendor's export anywhere (config topology.networkTable).
const DefaultNetworkTable = "/etc/lpu/network.table"

// NetworkTable is a parsed vendor network table: the rings its links form,
// in canonical order (see the package documentation).
type NetworkTable struct {
	Rings [][]string
	lines map[string]int
}

type link struct{ peer, line int }

// tableEntry is one line of a network table that names LPUs: one token (an
// LPU alone) or two (a link), as written.
type tableEntry struct {
	line   int
	tokens []string
}

// Resolver maps a network table token to an LPU index; its error says why
// the token names no LPU (it is quoted in the error about that line).
type Resolver func(token string) (int, error)

// ParseNetworkTableFunc is ParseNetworkTable with the tokens resolved by
// resolve: discovery passes one that accepts LPU IDs and the PCI address
// of either function of a card. It runs in phases, each its own function:
// the format (tableEntries: lines to tokens, the only part a table_bdf.json
// reader would replace), the tokens (resolveEntries), the links
// (tableLinks) and the rings (tableCycles).
func ParseNetworkTableFunc(name string, data []byte, resolve Resolver) (*NetworkTable, error) {
	if len(data) > MaxTableBytes {
		return nil, fmt.Errorf("network table %s: larger than %d bytes", name, MaxTableBytes)
	}
	entries, err := tableEntries(name, data)
	if err != nil {
		return nil, err
	}
	ids, err := resolveEntries(name, entries, resolve)
	if err != nil {
		return nil, err
	}
	g, err := tableLinks(name, entries, ids)
	if err != nil {
		return nil, err
	}
	rings, err := tableCycles(name, g)
	if err != nil {
		return nil, err
	}
	return &NetworkTable{Rings: rings, lines: g.first}, nil
}

// lineErr is an error about one line of a table.
func lineErr(name string, line int, format string, args ...any) error {
	return fmt.Errorf("network table %s line %d: %s", name, line, fmt.Sprintf(format, args...))
}

// tableEntries splits the text format into entries: "#" comments and
// blank lines dropped, at most two tokens a line.
func tableEntries(name string, data []byte) ([]tableEntry, error) {
	var entries []tableEntry
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
			return nil, lineErr(name, lineNo, "want one link \"lpuA lpuB\" or one LPU alone, got %d fields", len(fields))
		}
		if len(fields) > 0 {
			entries = append(entries, tableEntry{line: lineNo, tokens: fields})
		}
	}
	return entries, nil
}

// resolveEntries maps every token to an LPU index.
func resolveEntries(name string, entries []tableEntry, resolve Resolver) ([][]int, error) {
	out := make([][]int, len(entries))
	for i, e := range entries {
		out[i] = make([]int, len(e.tokens))
		for j, tok := range e.tokens {
			idx, err := resolve(tok)
			if err != nil {
				return nil, lineErr(name, e.line, "%v", err)
			}
			out[i][j] = idx
		}
	}
	return out, nil
}

// tableGraph is the links of a table: neighbours and standalone LPUs, with
// the lines that named them.
type tableGraph struct {
	adj   map[int][]link
	alone map[int]int    // index → line of its standalone entry
	first map[string]int // ID → first line naming it
}

// tableLinks builds the graph, rejecting self links, duplicate links, a
// third link and an LPU both alone and linked. Errors quote the tokens as
// written (an address stays an address) with the IDs they resolved to.
func tableLinks(name string, entries []tableEntry, ids [][]int) (*tableGraph, error) {
	g := &tableGraph{adj: map[int][]link{}, alone: map[int]int{}, first: map[string]int{}}
	seen := map[[2]int]int{} // link (low, high) → line
	note := func(idx, line int) {
		if _, ok := g.first[ID(idx)]; !ok {
			g.first[ID(idx)] = line
		}
	}
	for i, e := range entries {
		lineNo := e.line
		label := func(j int) string {
			if e.tokens[j] == ID(ids[i][j]) {
				return e.tokens[j]
			}
			return fmt.Sprintf("%s (%s)", e.tokens[j], ID(ids[i][j]))
		}
		switch len(ids[i]) {
		case 1:
			a := ids[i][0]
			if l, ok := g.alone[a]; ok {
				return nil, lineErr(name, lineNo, "%s listed alone twice (first on line %d)", label(0), l)
			}
			if ls := g.adj[a]; len(ls) > 0 {
				return nil, lineErr(name, lineNo, "%s listed alone but linked on line %d", label(0), ls[0].line)
			}
			g.alone[a] = lineNo
			note(a, lineNo)
		case 2:
			a, b := ids[i][0], ids[i][1]
			if a == b {
				if e.tokens[0] != e.tokens[1] {
					return nil, lineErr(name, lineNo, "%s and %s are one card (%s): linked to itself", e.tokens[0], e.tokens[1], ID(a))
				}
				return nil, lineErr(name, lineNo, "%s linked to itself", label(0))
			}
			key := [2]int{min(a, b), max(a, b)}
			if l, ok := seen[key]; ok {
				return nil, lineErr(name, lineNo, "duplicate link %s %s (first on line %d)", label(0), label(1), l)
			}
			for j, x := range []int{a, b} {
				if l, ok := g.alone[x]; ok {
					return nil, lineErr(name, lineNo, "%s linked but listed alone on line %d", label(j), l)
				}
				if ls := g.adj[x]; len(ls) == 2 {
					return nil, lineErr(name, lineNo, "%s has a third link (already linked to %s on line %d and %s on line %d)",
						label(j), ID(ls[0].peer), ls[0].line, ID(ls[1].peer), ls[1].line)
				}
			}
			seen[key] = lineNo
			g.adj[a] = append(g.adj[a], link{b, lineNo})
			g.adj[b] = append(g.adj[b], link{a, lineNo})
			note(a, lineNo)
			note(b, lineNo)
		}
	}
	return g, nil
}

// tableCycles walks the graph into rings in canonical order (see the
// package documentation), rejecting chains that do not close.
func tableCycles(name string, g *tableGraph) ([][]string, error) {
	all := make([]int, 0, len(g.adj)+len(g.alone))
	for idx := range g.adj {
		all = append(all, idx)
	}
	for idx := range g.alone {
		all = append(all, idx)
	}
	if len(all) == 0 {
		return nil, fmt.Errorf("network table %s: no links", name)
	}
	slices.Sort(all)

	// A single link is a ring only when both ends have no other link.
	for _, idx := range all {
		ls := g.adj[idx]
		if len(ls) == 1 && len(g.adj[ls[0].peer]) != 1 {
			return nil, lineErr(name, ls[0].line, "%s has only one link (to %s): links must close a ring", ID(idx), ID(ls[0].peer))
		}
	}

	visited := make(map[int]bool, len(all))
	var rings [][]string
	for _, start := range all {
		if visited[start] {
			continue
		}
		ls := g.adj[start]
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
				next := g.adj[cur][0].peer
				if next == prev {
					next = g.adj[cur][1].peer
				}
				prev, cur = cur, next
			}
		}
		rings = append(rings, ring)
	}
	return rings, nil
}

package device

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
)

// Topology sources, the values of WithTopologySource (and of the config's
// topology.source). TopologyAuto takes the first source whose input exists,
// in this order: config, table, sysfs, index.
const (
	TopologyAuto   = "auto"
	TopologyConfig = "config" // explicit rings (WithRings)
	TopologyTable  = "table"  // the vendor network table (WithNetworkTable)
	TopologySysfs  = "sysfs"  // ring_id and ring_position attributes
	TopologyIndex  = "index"  // one ring of all LPUs in index order
)

// MaxRingAttr bounds ring_id and ring_position values.
const MaxRingAttr = 1<<16 - 1

// topology resolves the rings of the discovered devices: one resolution
// for every backend.
func (s *Sysfs) topology(devs []Device) ([][]string, error) {
	switch s.source {
	case TopologyAuto:
		return s.autoTopology(devs)
	case TopologyConfig:
		if len(s.rings) == 0 {
			return nil, errors.New("topology source config: no rings configured")
		}
		return checkRings(s.rings, devs)
	case TopologyTable:
		if s.table == "" {
			return nil, errors.New("topology source table: no network table configured")
		}
		return s.tableRings(devs)
	case TopologySysfs:
		rings, found, err := s.b.attrRings(devs)
		if err == nil && !found && len(devs) > 0 {
			return nil, fmt.Errorf("topology source sysfs: no device has %s and %s", attrRingID, attrRingPos)
		}
		return rings, err
	case TopologyIndex:
		return indexRings(devs), nil
	default:
		return nil, checkSource(s.source)
	}
}

// autoTopology takes the first source whose input exists: config, table,
// the backend's ring attributes, index.
func (s *Sysfs) autoTopology(devs []Device) ([][]string, error) {
	if len(s.rings) > 0 {
		return checkRings(s.rings, devs)
	}
	if s.table != "" {
		rings, err := s.tableRings(devs)
		if !errors.Is(err, fs.ErrNotExist) {
			return rings, err
		}
		s.warn("network table absent, trying sysfs ring attributes", "file", s.table)
	}
	rings, found, err := s.b.attrRings(devs)
	if err != nil || found {
		return rings, err
	}
	if w := s.b.indexRingWarning(); w != "" && len(devs) > 1 {
		s.warn(w)
	}
	return indexRings(devs), nil
}

// indexRings is one ring of all devices in index order (none when there are
// no devices).
func indexRings(devs []Device) [][]string {
	if len(devs) == 0 {
		return nil
	}
	ring := make([]string, len(devs))
	for i, d := range devs {
		ring[i] = d.ID
	}
	return [][]string{ring}
}

// checkRings validates explicit rings against the discovered devices: every
// ID well formed and discovered, none twice, no empty ring, every discovered
// device on a ring. The rings are returned as given.
func checkRings(rings [][]string, devs []Device) ([][]string, error) {
	known := make(map[string]bool, len(devs))
	for _, d := range devs {
		known[d.ID] = true
	}
	type pos struct{ ring, pos int }
	at := map[string]pos{}
	out := make([][]string, len(rings))
	for r, ring := range rings {
		if len(ring) == 0 {
			return nil, fmt.Errorf("topology rings: ring %d is empty", r)
		}
		for p, id := range ring {
			if _, err := ParseID(id); err != nil {
				return nil, fmt.Errorf("topology rings: ring %d position %d: %w", r, p, err)
			}
			if !known[id] {
				return nil, fmt.Errorf("topology rings: ring %d position %d: %s not discovered on this node", r, p, id)
			}
			if prev, ok := at[id]; ok {
				return nil, fmt.Errorf("topology rings: ring %d position %d: %s already on ring %d position %d", r, p, id, prev.ring, prev.pos)
			}
			at[id] = pos{r, p}
		}
		out[r] = slices.Clone(ring)
	}
	if missing := notOn(devs, at); len(missing) > 0 {
		return nil, fmt.Errorf("topology rings: %s discovered but on no ring", strings.Join(missing, ", "))
	}
	return out, nil
}

// notOn lists the devices (by index) whose ID is not a key of on.
func notOn[V any](devs []Device, on map[string]V) []string {
	var missing []string
	for _, d := range devs {
		if _, ok := on[d.ID]; !ok {
			missing = append(missing, d.ID)
		}
	}
	return missing
}

// tableRings reads and validates the network table under the root. A missing
// file wraps fs.ErrNotExist.
func (s *Sysfs) tableRings(devs []Device) ([][]string, error) {
	data, err := readBounded(s.under(s.table), MaxTableBytes)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("network table %s: %w", s.table, fs.ErrNotExist)
		}
		return nil, fmt.Errorf("network table %s: %s", s.table, describeErr("read", s.table, err))
	}
	t, err := ParseNetworkTableFunc(s.table, data, tableResolver(devs))
	if err != nil {
		return nil, err
	}
	on := map[string]bool{}
	for _, ring := range t.Rings {
		for _, id := range ring {
			on[id] = true
		}
	}
	if missing := notOn(devs, on); len(missing) > 0 {
		return nil, fmt.Errorf("network table %s: %s discovered but not in the table", s.table, strings.Join(missing, ", "))
	}
	return t.Rings, nil
}

// tableResolver resolves the tokens of a network table against the
// discovered devices: an LPU ID, or the PCI address of any function of an
// LPU's card (case-insensitive), so a table keyed by either the user or the
// management function of an Orion card names that card.
func tableResolver(devs []Device) Resolver {
	byAddr := map[string]int{}
	known := make(map[int]bool, len(devs))
	for _, d := range devs {
		known[d.Index] = true
		for _, a := range d.PCIFunctions {
			byAddr[strings.ToLower(a)] = d.Index
		}
	}
	return func(tok string) (int, error) {
		if isPCIAddress(tok) {
			idx, ok := byAddr[strings.ToLower(tok)]
			if !ok {
				return 0, fmt.Errorf("%s is not a PCI function of an LPU discovered on this node", tok)
			}
			return idx, nil
		}
		idx, err := ParseID(tok)
		if err != nil {
			return 0, fmt.Errorf("%q is not an LPU ID (want %sN) or a PCI address (DDDD:BB:DD.F)", clip(tok), IDPrefix)
		}
		if !known[idx] {
			return 0, fmt.Errorf("%s not discovered on this node", tok)
		}
		return idx, nil
	}
}

// attrRings builds rings from the ring_id and ring_position attributes.
// found is false when no device has them. Every device must have both or
// none; positions of a ring must be 0..n-1 without gaps or duplicates. Rings
// are ordered by ring_id, members by ring_position. One exception keeps a
// broken device from breaking the node: an unhealthy device with neither
// attribute (or unreadable ones) is put on a ring of its own, after the
// others, and a warning is logged.
func (b *lpuBackend) attrRings(devs []Device) (rings [][]string, found bool, err error) {
	got, with, without, orphans, err := b.readRingAttrs(devs)
	if err != nil {
		return nil, true, err
	}
	if len(with) == 0 {
		return nil, false, nil
	}
	if len(orphans) > 0 {
		b.warn("unhealthy devices without ring attributes are put on rings of their own",
			"ids", strings.Join(orphans, ","))
	}
	if len(without) > 0 {
		return nil, true, fmt.Errorf("ring attributes: %s have %s and %s but %s do not (all devices or none)",
			strings.Join(with, ", "), attrRingID, attrRingPos, strings.Join(without, ", "))
	}
	rings, err = ringsFromAttrs(devs, got)
	if err != nil {
		return nil, true, err
	}
	for _, id := range orphans {
		rings = append(rings, []string{id})
	}
	return rings, true, nil
}

// ringPlace is a device's ring_id and ring_position.
type ringPlace struct{ ring, pos int64 }

// readRingAttrs reads the ring attributes of every device: got holds the
// devices with both (listed in with), without those with neither,
// orphans the unhealthy ones with neither. A device with one of the two
// is an error.
func (b *lpuBackend) readRingAttrs(devs []Device) (got map[string]ringPlace, with, without, orphans []string, err error) {
	got = make(map[string]ringPlace, len(devs))
	for _, d := range devs {
		ring, okRing, err := b.ringAttr(d.ID, attrRingID)
		if err != nil {
			return nil, nil, nil, nil, err
		}
		pos, okPos, err := b.ringAttr(d.ID, attrRingPos)
		if err != nil {
			return nil, nil, nil, nil, err
		}
		switch {
		case okRing && okPos:
			with = append(with, d.ID)
			got[d.ID] = ringPlace{ring, pos}
		case !okRing && !okPos && !d.Health.Healthy:
			orphans = append(orphans, d.ID)
		case !okRing && !okPos:
			without = append(without, d.ID)
		case okRing:
			return nil, nil, nil, nil, fmt.Errorf("ring attributes: %s has %s but no %s", d.ID, hostAttr(d.ID, attrRingID), hostAttr(d.ID, attrRingPos))
		default:
			return nil, nil, nil, nil, fmt.Errorf("ring attributes: %s has %s but no %s", d.ID, hostAttr(d.ID, attrRingPos), hostAttr(d.ID, attrRingID))
		}
	}
	return got, with, without, orphans, nil
}

// ringsFromAttrs orders the devices in got into rings by ring_id, members
// by ring_position (0..n-1, no gaps, no duplicates).
func ringsFromAttrs(devs []Device, got map[string]ringPlace) ([][]string, error) {
	byRing := map[int64][]string{}
	var ringIDs []int64
	for _, d := range devs {
		a, ok := got[d.ID]
		if !ok {
			continue // an orphan
		}
		if _, seen := byRing[a.ring]; !seen {
			ringIDs = append(ringIDs, a.ring)
		}
		byRing[a.ring] = append(byRing[a.ring], d.ID)
	}
	slices.Sort(ringIDs)
	var rings [][]string
	for _, rid := range ringIDs {
		members := byRing[rid]
		ring := make([]string, len(members))
		for _, id := range members {
			p := got[id].pos
			if p >= int64(len(members)) {
				return nil, fmt.Errorf("ring attributes: %s has ring_id %d ring_position %d, but ring %d has %d devices (positions 0..%d)",
					id, rid, p, rid, len(members), len(members)-1)
			}
			if ring[p] != "" {
				return nil, fmt.Errorf("ring attributes: %s and %s both have ring_id %d ring_position %d", ring[p], id, rid, p)
			}
			ring[p] = id
		}
		rings = append(rings, ring)
	}
	return rings, nil
}

// ringAttr reads one ring attribute; ok is false when the file is absent or
// unreadable. A value that is not a decimal up to MaxRingAttr is an error.
func (b *lpuBackend) ringAttr(id, name string) (v int64, ok bool, err error) {
	host := hostAttr(id, name)
	text, err := readAttr(b.under(host))
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			// A broken device must not break the topology of the others:
			// unreadable counts as absent, and the all-or-none rule decides.
			b.warn("ignoring ring attribute", "device", id, "err", describeErr("read", host, err))
		}
		return 0, false, nil
	}
	v, err = parseDecimal(text, MaxRingAttr)
	if err != nil {
		return 0, false, fmt.Errorf("ring attributes: %s: %w", host, err)
	}
	return v, true, nil
}

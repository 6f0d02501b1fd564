package device

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/hyperaccel/lpu-node/internal/atomicfile"
)

// How the PCI backends keep LPU IDs stable. An ID names a card for as long
// as the node lives, whatever happens to the card's driver binding:
//
//   - At the first discovery, IDs are the rank of each card's address
//     (DDDD:BB:DD on Orion, the function's address on Bertha) among every
//     card present, bound or not, flashed or not.
//   - Each card's address → ID pair is then remembered: in memory for the
//     life of the Sysfs, and in <stateDir>/device-ids-<backend>.json when a
//     state directory is set (WithStateDir), so a restart keeps them too.
//   - A card not seen before gets the next ID above every ID ever given;
//     an ID is never reused for another card, so a running pod's ID never
//     comes to name another card. A card that leaves the bus keeps its ID
//     for when it returns.
//
// Deleting the file renumbers the cards by address at the next start.

// idFileVersion is the version of the persisted map's format.
const idFileVersion = 1

// idFile is the persisted address → ID map.
type idFile struct {
	Version int               `json:"version"`
	Backend string            `json:"backend"`
	IDs     map[string]string `json:"ids"` // card address → LPU ID
}

// idMap gives card addresses their stable IDs. Safe for concurrent use.
type idMap struct {
	mu      sync.Mutex
	backend string
	path    string // the persisted map, a host path; "" keeps it in memory
	loaded  bool
	byKey   map[string]int
}

func newIDMap(stateDir, backend string) *idMap {
	m := &idMap{backend: backend, byKey: map[string]int{}}
	if stateDir != "" {
		m.path = filepath.Join(stateDir, "device-ids-"+backend+".json")
	}
	return m
}

// assign returns the index of every card address in keys (ascending),
// giving new addresses new IDs and persisting the map when it grew.
func (m *idMap) assign(t *tree, keys []string) map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.loaded {
		m.load(t)
		m.loaded = true
	}
	first, next := len(m.byKey) == 0, 0
	for _, i := range m.byKey {
		next = max(next, i+1)
	}
	grew := false
	out := make(map[string]int, len(keys))
	for rank, k := range keys {
		i, ok := m.byKey[k]
		switch {
		case ok:
		case first:
			i = rank
		case next > 1<<16-1:
			t.warn("no LPU ID left for a new card", "address", k)
			continue
		default:
			i, next = next, next+1
		}
		if !ok {
			m.byKey[k], grew = i, true
		}
		out[k] = i
	}
	if grew {
		m.save(t)
	}
	return out
}

// load reads the persisted map; a missing file is an empty map, a broken
// one is ignored with a warning (the cards are then ranked afresh).
func (m *idMap) load(t *tree) {
	if m.path == "" {
		return
	}
	data, err := readBounded(m.path, 1<<20)
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	byKey, err := parseIDFile(data, m.backend)
	if err != nil {
		t.warn("ignoring the persisted LPU ID map", "file", m.path, "err", err)
		return
	}
	m.byKey = byKey
}

// parseIDFile checks and decodes a persisted map: addresses and IDs well
// formed, no ID given twice.
func parseIDFile(data []byte, backend string) (map[string]int, error) {
	var f idFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("parse: %w", err)
	}
	if f.Version != idFileVersion || f.Backend != backend {
		return nil, fmt.Errorf("version %d backend %q, want %d %q", f.Version, clip(f.Backend), idFileVersion, backend)
	}
	byKey := make(map[string]int, len(f.IDs))
	owner := map[int]string{}
	for k, id := range f.IDs {
		i, err := ParseID(id)
		if err != nil {
			return nil, err
		}
		if !isPCIAddress(k) && !isPCIAddress(k+".0") {
			return nil, fmt.Errorf("%q is not a PCI address", clip(k))
		}
		if o, dup := owner[i]; dup {
			return nil, fmt.Errorf("%s given to both %s and %s", id, o, k)
		}
		owner[i], byKey[strings.ToLower(k)] = k, i
	}
	return byKey, nil
}

// save persists the map; a failure is warned about and the IDs stay in
// memory.
func (m *idMap) save(t *tree) {
	if m.path == "" {
		return
	}
	f := idFile{Version: idFileVersion, Backend: m.backend, IDs: make(map[string]string, len(m.byKey))}
	for k, i := range m.byKey {
		f.IDs[k] = ID(i)
	}
	data, err := json.MarshalIndent(f, "", "  ")
	if err == nil {
		err = atomicfile.Write(m.path, append(data, '\n'), atomicfile.WithMode(0o644))
	}
	if err != nil {
		t.warn("could not persist the LPU ID map; IDs kept in memory", "file", m.path, "err", err)
	}
}

// sortedKeys returns the keys of m, ascending.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

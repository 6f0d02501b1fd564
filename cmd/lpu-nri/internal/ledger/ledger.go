package ledger

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"
)

// FileName is the ledger's file name in the state directory.
const FileName = "allocations.json"

// Bounds of the ledger. A node runs a few hundred containers at most; the
// cap only stops the file from growing without end.
const (
	MaxEntries = 4096
	Retention  = 24 * time.Hour
	// maxFileSize bounds what Open reads: MaxEntries entries of well under
	// 200 bytes each.
	maxFileSize = MaxEntries * 256
)

// ErrOtherPod is returned by Claim when the ID belongs to another pod.
var ErrOtherPod = errors.New("allocation ID already used by another pod")

// entry is one allocation ID's record.
type entry struct {
	Pod  string    `json:"pod"`  // UID of the first pod that used the ID
	Seen time.Time `json:"seen"` // last time that pod was seen using or holding it
}

// file is the on-disk form.
type file struct {
	Version     int              `json:"version"`
	Allocations map[string]entry `json:"allocations"`
}

// Ledger is safe for concurrent use.
type Ledger struct {
	mu      sync.Mutex
	path    string
	entries map[string]entry
	now     func() time.Time
}

// Open loads <stateDir>/allocations.json, or starts empty when it does not
// exist. A file that cannot be read or parsed is an error naming it: the
// daemon must not forget which pod holds which allocation silently.
func Open(stateDir string) (*Ledger, error) {
	l := &Ledger{path: filepath.Join(stateDir, FileName), entries: map[string]entry{}, now: time.Now}
	f, err := os.Open(l.path)
	if errors.Is(err, os.ErrNotExist) {
		return l, nil
	}
	if err != nil {
		return nil, fmt.Errorf("allocation ledger %s: %w", l.path, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("allocation ledger %s: %w", l.path, err)
	}
	if len(data) > maxFileSize {
		return nil, fmt.Errorf("allocation ledger %s: larger than %d bytes (remove it to start over)", l.path, maxFileSize)
	}
	var fl file
	if err := json.Unmarshal(data, &fl); err != nil {
		return nil, fmt.Errorf("allocation ledger %s: %w (remove it to start over)", l.path, err)
	}
	if fl.Version != 1 {
		return nil, fmt.Errorf("allocation ledger %s: version %d, want 1", l.path, fl.Version)
	}
	for id, e := range fl.Allocations {
		if e.Pod == "" {
			return nil, fmt.Errorf("allocation ledger %s: allocation %q has no pod", l.path, id)
		}
		l.entries[id] = e
	}
	l.evict()
	return l, nil
}

// Path returns the ledger file's path.
func (l *Ledger) Path() string { return l.path }

// Len returns the number of recorded IDs.
func (l *Ledger) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.entries)
}

// Claim records pod as the user of allocID, or confirms it. It returns an
// error wrapping ErrOtherPod, naming the first pod, when another pod used
// the ID first, and a write error when a new record could not be made
// durable (the caller refuses then: an unrecorded ID could be replayed).
func (l *Ledger) Claim(allocID, pod string) error {
	if pod == "" {
		return errors.New("pod has no UID; cannot record its allocation")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if e, ok := l.entries[allocID]; ok {
		if e.Pod != pod {
			return fmt.Errorf("%w: allocation %s belongs to pod UID %s, not %s", ErrOtherPod, allocID, e.Pod, pod)
		}
		e.Seen = now
		l.entries[allocID] = e // in memory only: a restart loses at most the refresh
		return nil
	}
	l.entries[allocID] = entry{Pod: pod, Seen: now}
	l.evict()
	if err := l.save(); err != nil {
		delete(l.entries, allocID)
		return err
	}
	return nil
}

// Seed records the allocation IDs of containers already running (ID to
// pod UID), for IDs not yet recorded, and saves once: after the file was
// lost, the pods that hold an allocation claim it before anyone else can.
// It returns the IDs recorded for another pod than the one now holding them.
func (l *Ledger) Seed(running map[string]string) (conflicts []string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now, added := l.now(), false
	for id, pod := range running {
		if pod == "" {
			continue
		}
		e, ok := l.entries[id]
		switch {
		case !ok:
			l.entries[id] = entry{Pod: pod, Seen: now}
			added = true
		case e.Pod != pod:
			conflicts = append(conflicts, id)
		}
	}
	if !added {
		return conflicts, nil
	}
	l.evict()
	return conflicts, l.save()
}

// Prune drops IDs whose pod is not in live and was last seen more than
// Retention ago, and marks the IDs of live pods seen now. It saves the file
// when it dropped something.
func (l *Ledger) Prune(live map[string]bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	dropped := false
	for id, e := range l.entries {
		switch {
		case live[e.Pod]:
			e.Seen = now
			l.entries[id] = e
		case now.Sub(e.Seen) > Retention:
			delete(l.entries, id)
			dropped = true
		}
	}
	if !dropped {
		return nil
	}
	return l.save()
}

// evict drops the least recently seen IDs beyond MaxEntries.
func (l *Ledger) evict() {
	if len(l.entries) <= MaxEntries {
		return
	}
	ids := make([]string, 0, len(l.entries))
	for id := range l.entries {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return l.entries[ids[i]].Seen.Before(l.entries[ids[j]].Seen) })
	for _, id := range ids[:len(ids)-MaxEntries] {
		delete(l.entries, id)
	}
}

// save writes the ledger atomically: a temp file in the same directory,
// fsync, rename over the old file.
func (l *Ledger) save() error {
	data, err := json.Marshal(file{Version: 1, Allocations: l.entries})
	if err != nil {
		return fmt.Errorf("allocation ledger: encode: %w", err)
	}
	dir := filepath.Dir(l.path)
	tmp, err := os.CreateTemp(dir, "."+FileName+".*.tmp")
	if err != nil {
		return fmt.Errorf("allocation ledger: create temp in %s: %w", dir, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("allocation ledger: write %s: %w", tmp.Name(), err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("allocation ledger: sync %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("allocation ledger: close %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), l.path); err != nil {
		return fmt.Errorf("allocation ledger: rename to %s: %w", l.path, err)
	}
	return nil
}

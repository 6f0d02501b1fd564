package ledger

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/hyperaccel/lpu-node/internal/atomicfile"
	"github.com/hyperaccel/lpu-node/internal/statedir"
)

// FileName is the ledger's snapshot in the state directory; LogName is
// its append-only log of the IDs recorded since the last compaction.
const (
	FileName = "allocations.json"
	LogName  = "allocations.log"
)

// Bounds of the ledger. A node runs a few hundred containers at most; the
// cap only stops the files from growing without end.
const (
	MaxEntries = 4096
	Retention  = 24 * time.Hour
	// maxFileSize bounds what Open reads of the snapshot: MaxEntries
	// entries of well under 200 bytes each.
	maxFileSize = MaxEntries * 256
	// compactAfter is the log length, in records, that triggers a
	// compaction; maxLogSize bounds what Open reads of the log (several
	// failed compactions' worth).
	compactAfter = MaxEntries
	maxLogSize   = 4 * compactAfter * 512
)

// ErrOtherPod is returned by Claim when the ID belongs to another pod.
var ErrOtherPod = errors.New("allocation ID already used by another pod")

// ErrFull is returned by Claim when the ledger holds MaxEntries IDs, all of
// pods that are still live: none can be evicted without opening a replay.
var ErrFull = errors.New("allocation ledger full")

// entry is one allocation ID's record.
type entry struct {
	Pod  string    `json:"pod"`  // UID of the first pod that used the ID
	Seen time.Time `json:"seen"` // last time that pod was seen using or holding it
}

// file is the snapshot's form.
type file struct {
	Version     int              `json:"version"`
	Allocations map[string]entry `json:"allocations"`
}

// record is one line of the log: a new ID and the IDs evicted for it.
type record struct {
	ID      string    `json:"id"`
	Pod     string    `json:"pod"`
	Seen    time.Time `json:"seen"`
	Evicted []string  `json:"evicted,omitempty"`
}

// Ledger is safe for concurrent use.
type Ledger struct {
	mu      sync.Mutex
	path    string // snapshot
	logPath string
	entries map[string]entry
	live    map[string]bool     // pod UIDs known to be running
	byPod   map[string][]string // pod UID to its IDs
	order   candidates          // eviction order (evict.go)
	log     *os.File            // O_APPEND
	logLen  int                 // records in the log
	logSize int64               // bytes in the log, to cut a failed append off
	dirty   bool                // the log may end in a torn line: compact before appending
	now     func() time.Time
}

// Open loads the ledger from stateDir (creating the directory 0700 when
// missing), or starts empty. A file that cannot be read or parsed, or that
// fails the state checks, is an error naming it: the daemon must not
// forget which pod holds which allocation silently.
func Open(stateDir string) (*Ledger, error) {
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return nil, fmt.Errorf("allocation ledger: create state dir %s: %w", stateDir, err)
	}
	dir, err := statedir.Check(stateDir)
	if err != nil {
		return nil, fmt.Errorf("allocation ledger: %w", err)
	}
	l := &Ledger{path: filepath.Join(dir, FileName), logPath: filepath.Join(dir, LogName),
		entries: map[string]entry{}, live: map[string]bool{}, byPod: map[string][]string{}, now: time.Now}
	if err := l.loadSnapshot(); err != nil {
		return nil, err
	}
	replayed, torn, err := l.replayLog()
	if err != nil {
		return nil, err
	}
	f, err := statedir.OpenFile(l.logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("allocation ledger %s: %w", l.logPath, err)
	}
	l.log = f
	if err := atomicfile.SyncDir(dir); err != nil { // the log's name, when it is new
		f.Close()
		return nil, fmt.Errorf("allocation ledger: %w", err)
	}
	if replayed > 0 || torn {
		if err := l.compact(); err != nil {
			f.Close()
			return nil, err
		}
	}
	l.rebuild()
	return l, nil
}

// loadSnapshot reads the snapshot, a missing one being empty.
func (l *Ledger) loadSnapshot() error {
	data, err := readState(l.path, maxFileSize)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var fl file
	if err := json.Unmarshal(data, &fl); err != nil {
		return fmt.Errorf("allocation ledger %s: %w (remove it to start over)", l.path, err)
	}
	if fl.Version != 1 {
		return fmt.Errorf("allocation ledger %s: version %d, want 1", l.path, fl.Version)
	}
	for id, e := range fl.Allocations {
		if e.Pod == "" {
			return fmt.Errorf("allocation ledger %s: allocation %q has no pod", l.path, id)
		}
		l.put(id, e)
	}
	return nil
}

// replayLog applies the log's records in order. A last line without its
// newline is a torn append and is ignored; any other bad line is an error.
func (l *Ledger) replayLog() (n int, torn bool, err error) {
	data, err := readState(l.logPath, maxLogSize)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	for line := 1; len(data) > 0; line++ {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			return n, true, nil
		}
		var r record
		if err := json.Unmarshal(data[:i], &r); err != nil || r.ID == "" || r.Pod == "" {
			return n, false, fmt.Errorf("allocation ledger %s: line %d: not a record (%v); remove it to start over", l.logPath, line, err)
		}
		l.apply(r)
		n++
		data = data[i+1:]
	}
	return n, false, nil
}

// readState reads a state file after the state checks, up to limit bytes.
func readState(path string, limit int64) ([]byte, error) {
	f, err := statedir.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("allocation ledger %s: %w", path, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("allocation ledger %s: %w", path, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("allocation ledger %s: larger than %d bytes (remove it to start over)", path, limit)
	}
	return data, nil
}

// Path returns the ledger snapshot's path.
func (l *Ledger) Path() string { return l.path }

// Len returns the number of recorded IDs.
func (l *Ledger) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.entries)
}

// Close closes the log. The ledger must not be used afterwards.
func (l *Ledger) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.log.Close()
}

// Claim records pod as the user of allocID, or confirms it, and marks pod
// live. It returns an error wrapping ErrOtherPod, naming the first pod,
// when another pod used the ID first; one wrapping ErrFull when the ID is
// new and every recorded ID is a live pod's; and a write error when the new
// record could not be made durable (the caller refuses then: an unrecorded
// ID could be replayed).
func (l *Ledger) Claim(allocID, pod string) error {
	if pod == "" {
		return errors.New("pod has no UID; cannot record its allocation")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	l.live[pod] = true
	if e, ok := l.entries[allocID]; ok {
		if e.Pod != pod {
			return fmt.Errorf("%w: allocation %s belongs to pod UID %s, not %s", ErrOtherPod, allocID, e.Pod, pod)
		}
		e.Seen = now
		l.entries[allocID] = e // in memory only: a restart loses at most the refresh
		return nil
	}
	victims, err := l.victims(1)
	if err != nil {
		return err
	}
	if err := l.commit([]record{{ID: allocID, Pod: pod, Seen: now, Evicted: victims}}); err != nil {
		l.restoreIDs(victims)
		return err
	}
	return nil
}

// commit appends recs to the log in one write and one fsync, then applies
// them; on error nothing is applied. It compacts when the log is long.
func (l *Ledger) commit(recs []record) error {
	if l.dirty {
		if err := l.compact(); err != nil {
			return err
		}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf) // one record per line
	for _, r := range recs {
		if err := enc.Encode(r); err != nil {
			return fmt.Errorf("allocation ledger: encode: %w", err)
		}
	}
	if l.logSize+int64(buf.Len()) > maxLogSize {
		return fmt.Errorf("allocation ledger %s: log full and compaction failing; refusing new allocation IDs", l.logPath)
	}
	if err := l.append(buf.Bytes()); err != nil {
		return err
	}
	for _, r := range recs {
		l.apply(r)
	}
	l.logLen += len(recs)
	if l.logLen >= compactAfter {
		_ = l.compact() // the records are durable in the log; a failed compaction is retried on the next commit
	}
	return nil
}

// append writes b at the end of the log and fsyncs it. A failed append is
// cut off again, so the log never holds a torn line before a good one.
func (l *Ledger) append(b []byte) error {
	_, err := l.log.Write(b)
	if err == nil {
		err = l.log.Sync()
	}
	if err != nil {
		if terr := l.log.Truncate(l.logSize); terr != nil {
			l.dirty = true
		}
		return fmt.Errorf("allocation ledger: append to %s: %w", l.logPath, err)
	}
	l.logSize += int64(len(b))
	return nil
}

// apply makes r's change in memory.
func (l *Ledger) apply(r record) {
	for _, id := range r.Evicted {
		l.drop(id)
	}
	if _, ok := l.entries[r.ID]; !ok {
		l.put(r.ID, entry{Pod: r.Pod, Seen: r.Seen})
	}
}

// compact writes every entry to the snapshot (atomicfile) and empties the
// log. A crash between the two replays log records the snapshot already
// holds, which changes nothing.
func (l *Ledger) compact() error {
	data, err := json.Marshal(file{Version: 1, Allocations: l.entries})
	if err != nil {
		return fmt.Errorf("allocation ledger: encode: %w", err)
	}
	if err := atomicfile.Write(l.path, data, atomicfile.WithMode(0o600), stateOwner()); err != nil {
		l.dirty = true
		return fmt.Errorf("allocation ledger: %w", err)
	}
	if err := l.log.Truncate(0); err != nil {
		l.dirty = true
		return fmt.Errorf("allocation ledger: truncate %s: %w", l.logPath, err)
	}
	if err := l.log.Sync(); err != nil {
		l.dirty = true
		return fmt.Errorf("allocation ledger: sync %s: %w", l.logPath, err)
	}
	l.logLen, l.logSize, l.dirty = 0, 0, false
	return nil
}

// stateOwner makes the snapshot the daemon's own, uid and group, whatever
// a setgid state dir would give it: the owner statedir checks for.
func stateOwner() atomicfile.Option {
	return atomicfile.WithOwner(os.Geteuid(), os.Getegid())
}

// Seed records the allocation IDs of containers already running (ID to
// pod UID), for IDs not yet recorded, in one append, and marks their pods
// live: after the file was lost, the pods that hold an allocation claim it
// before anyone else can. Running pods' IDs are recorded even beyond the
// cap. It returns the IDs recorded for another pod than the one now
// holding them.
func (l *Ledger) Seed(running map[string]string) (conflicts []string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	var recs []record
	for id, pod := range running {
		if pod == "" {
			continue
		}
		l.live[pod] = true
		e, ok := l.entries[id]
		switch {
		case !ok:
			recs = append(recs, record{ID: id, Pod: pod, Seen: now})
		case e.Pod != pod:
			conflicts = append(conflicts, id)
		}
	}
	if len(recs) == 0 {
		return conflicts, nil
	}
	victims, err := l.victims(len(recs))
	if err == nil {
		recs[0].Evicted = victims
	}
	if err := l.commit(recs); err != nil {
		l.restoreIDs(victims)
		return conflicts, err
	}
	return conflicts, nil
}

// Prune takes live as the set of running pods (the runtime's full list),
// marks their IDs seen now, and drops IDs whose pod is not in live and was
// last seen more than Retention ago, compacting when it dropped something.
func (l *Ledger) Prune(live map[string]bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	l.live = make(map[string]bool, len(live))
	for pod, ok := range live {
		if ok {
			l.live[pod] = true
		}
	}
	dropped := false
	for id, e := range l.entries {
		switch {
		case l.live[e.Pod]:
			e.Seen = now
			l.entries[id] = e
		case now.Sub(e.Seen) > Retention:
			l.drop(id)
			dropped = true
		}
	}
	l.rebuild()
	if !dropped {
		return nil
	}
	return l.compact()
}

// PodGone unmarks pod as live (its sandbox was removed): its IDs may be
// evicted from now on, and age out Retention from now.
func (l *Ledger) PodGone(pod string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.live[pod] {
		return
	}
	delete(l.live, pod)
	now := l.now()
	for _, id := range l.byPod[pod] {
		e := l.entries[id]
		e.Seen = now
		l.put(id, e)
	}
}

package ledger

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/hyperaccel/lpu-node/internal/atomicfile"
	"github.com/hyperaccel/lpu-node/internal/statedir"
)

// FileName is the ledger's snapshot in the state directory; LogName is
// the append-only log earlier lpu-nri wrote next to it (JSON lines), read
// once at Open and removed by the next compaction; new records go to the
// write-ahead log, WALName (wal.go).
const (
	FileName = "allocations.json"
	LogName  = "allocations.log"
)

// Bounds of the ledger. What a node can hold live is its LPUs (a live pod
// holds at least one) times MaxPerPod: 8 × 32 = 256 IDs on a server of 8,
// 16 times under MaxEntries; the rest of the cap is IDs that can no longer
// be presented, evicted first. The shares keep one pod or one namespace
// from holding the node's ledger (F1 of the fourth hardening round).
const (
	MaxEntries = 4096
	// MaxPerPod bounds the IDs one pod may hold: one per container that
	// requests LPUs (the kubelet allocates per container; restarts reuse
	// the ID), so only a pod with more LPU containers than this is refused.
	MaxPerPod = 32
	// MaxPerNamespace bounds the IDs of one namespace's pods: at its share
	// a new ID evicts the namespace's own oldest evictable ID, or is
	// refused; other namespaces are not affected.
	MaxPerNamespace = MaxEntries / 4
	Retention       = 24 * time.Hour
	// maxFileSize bounds what Open reads of the snapshot: MaxEntries
	// entries of well under 200 bytes each.
	maxFileSize = MaxEntries * 256
	// compactAfter is the number of batches in the log that triggers a
	// compaction; maxLogSize bounds what Open reads of an old log.
	compactAfter = MaxEntries
	maxLogSize   = 4 * compactAfter * 512
	// batchRoom is what a batch of one Claim takes at most in the log, so
	// a Claim compacts before it checks, not after.
	batchRoom = 4096
)

// ErrOtherPod is returned by Claim when the ID belongs to another pod.
var ErrOtherPod = errors.New("allocation ID already used by another pod")

// ErrFull is returned by Claim when the ledger holds MaxEntries IDs, all of
// pods that are still live: none can be evicted without opening a replay.
var ErrFull = errors.New("allocation ledger full")

// ErrShare is returned by Claim when the pod or its namespace holds its
// whole share of the ledger (MaxPerPod, MaxPerNamespace) and none of its
// IDs can be evicted: that pod is refused, other tenants are not.
var ErrShare = errors.New("allocation ledger share used up")

// Holder is the pod presenting an allocation ID.
type Holder struct {
	// Namespace counts the ID against the namespace's share; "" (records
	// older lpu-nri wrote) counts only against MaxEntries.
	Namespace string
	Pod       string // UID
	// Sandbox is the ID of the pod sandbox the ID is presented in: the
	// pod is live while one of its sandboxes runs. "" stands for the
	// pod's only sandbox.
	Sandbox string
}

// entry is one allocation ID's record.
type entry struct {
	Pod  string    `json:"pod"`          // UID of the first pod that used the ID
	Seen time.Time `json:"seen"`         // last time that pod was seen using or holding it
	NS   string    `json:"ns,omitempty"` // the pod's namespace
	// idle: the container presenting it stopped (a completed init
	// container, or an app container between restarts); in memory only.
	idle bool
	// seq is the batch that records the ID; it is durable once the
	// ledger's synced count reaches it (0: loaded from disk).
	seq uint64
}

// file is the snapshot's form. Version 1 is what earlier lpu-nri wrote
// and read; they ignore WAL.
type file struct {
	Version     int              `json:"version"`
	WAL         uint64           `json:"wal,omitempty"` // generation of the log that follows it
	Allocations map[string]entry `json:"allocations"`
}

// record is one new ID and the IDs evicted for it, in a log batch.
type record struct {
	ID      string    `json:"id"`
	Pod     string    `json:"pod"`
	Seen    time.Time `json:"seen"`
	NS      string    `json:"ns,omitempty"`
	Evicted []string  `json:"evicted,omitempty"`
}

// Ledger is safe for concurrent use. New IDs are group-committed: each
// Claim writes its batch into the log under mu, then waits until a
// fdatasync that started after its write has returned; one caller at a
// time runs the fdatasync, without mu, for every batch written so far.
type Ledger struct {
	mu          sync.Mutex
	cond        *sync.Cond // on mu: a flush or compaction finished
	dir         string
	path        string // snapshot
	walPath     string
	stoppedPath string // StoppedName
	entries     map[string]entry
	running     map[string]map[string]bool // pod UID to its sandboxes known to be running: the live pods
	stopped     map[string]stop            // sandboxes seen stopped and not removed (sandboxes.go)
	// stoppedDirty: stopped changed since it was last written;
	// saveMu serializes the writes.
	stoppedDirty bool
	saveMu       sync.Mutex
	byPod        map[string][]string // pod UID to its IDs
	perNS        map[string]int      // namespace to its number of IDs
	order        candidates          // eviction order of gone pods' IDs (evict.go)
	idle         candidates          // eviction order of live pods' idle IDs, with evictIdle
	// evictIdle lets idle IDs of live pods be evicted after gone pods'
	// ones: only with the PodResources cross-check, which refuses a replay
	// of an evicted ID on its own (EvictIdle).
	evictIdle bool

	wal      *os.File // the write-ahead log, walSize bytes
	gen      uint64   // its generation, the snapshot's WAL field
	tail     int64    // where the next batch goes
	batches  int      // batches in the log
	seq      uint64   // batches written since Open
	synced   uint64   // batches known durable
	flushing bool     // a fdatasync runs without mu
	dirty    bool     // the log cannot be trusted (failed write or sync): compact before using it
	flushes  uint64   // fdatasyncs run, for the benchmark

	syncOnClaim bool          // Claim waits for its batch's fdatasync
	kick        chan struct{} // wakes the flusher
	stop        chan struct{}
	flusherDone sync.WaitGroup
	now         func() time.Time
}

// Option changes how Open sets the ledger up.
type Option func(*Ledger)

// EvictIdle makes the idle IDs of live pods (Idle: completed init
// containers, containers between restarts) evictable once no gone pod's
// ID is left, oldest first. Set it only when the kubelet's PodResources
// cross-check runs: an evicted ID presented again by another pod is then
// refused by the cross-check, as the kubelet assigned its LPUs to the
// first pod.
func EvictIdle() Option { return func(l *Ledger) { l.evictIdle = true } }

// Open loads the ledger from stateDir (creating the directory 0700 when
// missing), or starts empty, and compacts: the snapshot holds every
// entry and an empty log of a new generation follows it. A file that
// cannot be read or parsed, or that fails the state checks, is an error
// naming it: the daemon must not forget which pod holds which allocation
// silently.
func Open(stateDir string, opts ...Option) (*Ledger, error) {
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return nil, fmt.Errorf("allocation ledger: create state dir %s: %w", stateDir, err)
	}
	dir, err := statedir.Check(stateDir)
	if err != nil {
		return nil, fmt.Errorf("allocation ledger: %w", err)
	}
	removeTemps(dir)
	l := &Ledger{dir: dir, path: filepath.Join(dir, FileName), walPath: filepath.Join(dir, WALName),
		stoppedPath: filepath.Join(dir, StoppedName),
		entries:     map[string]entry{}, running: map[string]map[string]bool{}, stopped: map[string]stop{}, byPod: map[string][]string{}, perNS: map[string]int{}, now: time.Now}
	l.cond = sync.NewCond(&l.mu)
	for _, o := range opts {
		o(l)
	}
	if err := l.loadSnapshot(); err != nil {
		return nil, err
	}
	if err := l.loadStopped(); err != nil {
		return nil, err
	}
	if l.gen == 0 { // written by an earlier lpu-nri: its log applies
		if err := l.replayLog(); err != nil {
			return nil, err
		}
	}
	if err := l.replayWAL(); err != nil {
		return nil, err
	}
	if err := l.compact(); err != nil {
		return nil, err
	}
	l.rebuild()
	if !l.syncOnClaim {
		l.kick, l.stop = make(chan struct{}, 1), make(chan struct{})
		l.flusherDone.Add(1)
		go l.flusher()
	}
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
	l.gen = fl.WAL
	for id, e := range fl.Allocations {
		if e.Pod == "" {
			return fmt.Errorf("allocation ledger %s: allocation %q has no pod", l.path, id)
		}
		l.put(id, e)
	}
	return nil
}

// replayLog applies the old log's records in order. A last line without
// its newline is a torn append and is ignored; any other bad line is an
// error.
func (l *Ledger) replayLog() error {
	path := filepath.Join(l.dir, LogName)
	data, err := readState(path, maxLogSize)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for line := 1; len(data) > 0; line++ {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			return nil
		}
		var r record
		if err := json.Unmarshal(data[:i], &r); err != nil || r.ID == "" || r.Pod == "" {
			return fmt.Errorf("allocation ledger %s: line %d: not a record (%v); remove it to start over", path, line, err)
		}
		l.apply(r, 0)
		data = data[i+1:]
	}
	return nil
}

// replayWAL applies the write-ahead log when its generation is the
// snapshot's; an older one was folded into the snapshot already (a crash
// during compaction), a newer one means the snapshot was replaced by an
// older copy: an error, as records would be lost.
func (l *Ledger) replayWAL() error {
	data, err := readState(l.walPath, walSize)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	w, err := parseWAL(data)
	if err != nil {
		return fmt.Errorf("allocation ledger %s: %w (remove it to start over)", l.walPath, err)
	}
	switch {
	case w.gen < l.gen:
		return nil
	case w.gen > l.gen:
		return fmt.Errorf("allocation ledger %s: generation %d is newer than the snapshot %s (%d): the snapshot is an old copy (remove both to start over)", l.walPath, w.gen, l.path, l.gen)
	}
	for _, r := range w.recs {
		l.apply(r, 0)
	}
	return nil
}

// readState reads a state file after the state checks, up to limit bytes.
func readState(path string, limit int64) ([]byte, error) {
	data, err := statedir.ReadFile(path, limit)
	var large *statedir.TooLargeError
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, err
	case errors.As(err, &large):
		return nil, fmt.Errorf("allocation ledger %s: %w (remove it to start over)", path, err)
	case err != nil:
		return nil, fmt.Errorf("allocation ledger %s: %w", path, err)
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

// Close stops the flusher, makes every record durable and closes the log.
// The ledger must not be used afterwards.
func (l *Ledger) Close() error {
	if l.stop != nil {
		close(l.stop)
		l.flusherDone.Wait()
	}
	serr := l.saveStopped()
	l.mu.Lock()
	defer l.mu.Unlock()
	err := l.durable(l.seq)
	if err == nil {
		err = serr
	}
	for l.flushing {
		l.cond.Wait()
	}
	if cerr := l.wal.Close(); err == nil {
		err = cerr
	}
	return err
}

// Claim records h's pod as the user of allocID, or confirms it, and marks
// h's sandbox running (its pod live). It returns an error wrapping
// ErrOtherPod, naming the first pod, when another pod used the ID first; one wrapping ErrShare when the
// ID is new and the pod or its namespace holds its share with nothing of
// it evictable; one wrapping ErrFull when the ID is new and nothing can be
// evicted node-wide (naming the namespaces and pods holding the most); and
// a write error when the record could not be written (the caller refuses
// then).
//
// It returns once the record is in the log (the kernel's page cache: a
// crash or restart of the process loses nothing) and a fdatasync for it
// has been started in the background; SyncPod waits for that one, and the
// caller runs it before the pod's container can start (NRI
// StartContainer), so no container runs on a claim a crash of the node
// could lose. With SyncOnClaim, Claim itself waits (a second container of
// the pod arriving while the first one's batch is synced waits for that
// batch).
func (l *Ledger) Claim(allocID string, h Holder) error {
	pod := h.Pod
	if pod == "" {
		return errors.New("pod has no UID; cannot record its allocation")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.markRunning(pod, h.Sandbox)
	for {
		if e, ok := l.entries[allocID]; ok {
			if e.Pod != pod {
				return fmt.Errorf("%w: allocation %s belongs to pod UID %s, not %s", ErrOtherPod, allocID, e.Pod, pod)
			}
			e.Seen, e.idle = l.now(), false
			l.entries[allocID] = e // in memory only: a restart loses at most the refresh
			return l.wait(e.seq)
		}
		if !l.mustCompact(batchRoom) {
			break
		}
		if err := l.settle(batchRoom); err != nil { // may release mu: check again
			return err
		}
	}
	now := l.now()
	victims, err := l.room(h)
	if err != nil {
		return err
	}
	seq, err := l.commit([]record{{ID: allocID, Pod: pod, Seen: now, NS: h.Namespace, Evicted: victims}})
	if err != nil {
		l.restoreIDs(victims)
		return err
	}
	return l.wait(seq)
}

// wait makes batch seq durable before Claim returns with SyncOnClaim, or
// wakes the flusher to do it in the background.
func (l *Ledger) wait(seq uint64) error {
	if l.syncOnClaim {
		return l.durable(seq)
	}
	if seq > l.synced {
		select {
		case l.kick <- struct{}{}:
		default: // a wake-up is pending already
		}
	}
	return nil
}

// flusher makes written batches durable in the background, one
// fdatasync for all those written while the previous one ran, and writes
// the stopped sandboxes when they changed.
func (l *Ledger) flusher() {
	defer l.flusherDone.Done()
	for {
		select {
		case <-l.stop:
			return
		case <-l.kick:
		}
		l.mu.Lock()
		_ = l.durable(l.seq) // a failure marks the log dirty; SyncPod reports it
		l.mu.Unlock()
		_ = l.saveStopped() // a failure leaves it to the next wake-up or Close
	}
}

// SyncPod returns once every ID recorded for pod is on disk, at once when
// they are; an error when that fails or ctx ends first (the caller
// refuses to start the container then).
func (l *Ledger) SyncPod(ctx context.Context, pod string) error {
	l.mu.Lock()
	var seq uint64
	for _, id := range l.byPod[pod] {
		seq = max(seq, l.entries[id].seq)
	}
	if seq <= l.synced {
		l.mu.Unlock()
		return nil
	}
	l.mu.Unlock()
	done := make(chan error, 1)
	go func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		done <- l.durable(seq)
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("allocation ledger %s: the record of pod %s is not on disk yet (%v)", l.walPath, pod, ctx.Err())
	}
}

// apply makes r's change in memory; seq is the batch that carries it.
func (l *Ledger) apply(r record, seq uint64) {
	for _, id := range r.Evicted {
		l.drop(id)
	}
	if _, ok := l.entries[r.ID]; !ok {
		l.put(r.ID, entry{Pod: r.Pod, Seen: r.Seen, NS: r.NS, seq: seq})
	}
}

// stateOwner makes the snapshot the daemon's own, uid and group, whatever
// a setgid state dir would give it: the owner statedir checks for.
func stateOwner() atomicfile.Option {
	return atomicfile.WithOwner(os.Geteuid(), os.Getegid())
}

// Seed records the allocation IDs of containers already running (ID to
// holder), for IDs not yet recorded, in one batch, and marks their
// sandboxes running: after the file was lost, the pods that hold an
// allocation claim it before anyone else can. Running pods' IDs are recorded even beyond the
// cap and the shares. It returns the IDs recorded for another pod than the
// one now holding them.
func (l *Ledger) Seed(running map[string]Holder) (conflicts []string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.settle(batchRoom + 256*len(running)); err != nil {
		return nil, err
	}
	now := l.now()
	var recs []record
	for id, h := range running {
		if h.Pod == "" {
			continue
		}
		l.markRunning(h.Pod, h.Sandbox)
		e, ok := l.entries[id]
		switch {
		case !ok:
			recs = append(recs, record{ID: id, Pod: h.Pod, Seen: now, NS: h.Namespace})
		case e.Pod != h.Pod:
			conflicts = append(conflicts, id)
		}
	}
	if len(recs) == 0 {
		return conflicts, nil
	}
	victims, err := l.victims(len(recs), nil)
	if err == nil {
		recs[0].Evicted = victims
	}
	seq, err := l.commit(recs)
	if err != nil {
		l.restoreIDs(victims)
		return conflicts, err
	}
	return conflicts, l.durable(seq)
}

// Prune takes sandboxes as the runtime's full list (Synchronize): a pod
// is live while one of its sandboxes runs, that is, one that runs a
// container (Active) or that was not seen to stop (Stopped); the stops
// of sandboxes no longer listed are forgotten. It marks live pods' IDs
// seen now, and drops IDs whose pod is not live and was last seen more
// than Retention ago, compacting when it dropped something.
func (l *Ledger) Prune(sandboxes []Sandbox) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	l.running = make(map[string]map[string]bool, len(sandboxes))
	listed := make(map[string]bool, len(sandboxes))
	for _, s := range sandboxes {
		listed[s.ID] = true
		if _, stopped := l.stopped[s.ID]; s.Pod != "" && (s.Active || !stopped) {
			l.markRunning(s.Pod, s.ID)
		}
	}
	l.forgetStops(listed)
	dropped := false
	for id, e := range l.entries {
		switch {
		case l.isLive(e.Pod):
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
	l.dirty = true // the drops are in no batch: a compaction records them
	return l.settle(0)
}

// Idle marks allocID's container stopped: a completed init container or
// one between restarts. With EvictIdle its ID may be evicted from now on
// while its pod is live; a restart presenting it again (Claim) makes it
// busy again, or records it afresh for the same pod.
func (l *Ledger) Idle(allocID string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.entries[allocID]
	if !ok || e.idle {
		return
	}
	e.Seen, e.idle = l.now(), true
	l.put(allocID, e)
}

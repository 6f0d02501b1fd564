package state

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"tags.cncf.io/container-device-interface/pkg/cdi"

	checkpoint "github.com/hyperaccel/lpu-node/internal/dracheckpoint"
	"github.com/hyperaccel/lpu-node/internal/health"
	"github.com/hyperaccel/lpu-node/pkg/inject"
)

// Devices is the node's device state: health.Monitor in production.
type Devices interface {
	Snapshot() (health.Snapshot, <-chan struct{})
}

// Options configure a State.
type Options struct {
	StateDir string // checkpoint
	CDIDir   string // per-claim CDI specs
	Inject   inject.Options
	// Holder names this instance in the checkpoint lock's journal: the
	// pod UID (two pods share the state dir during a rolling update);
	// empty: "pid-<pid>".
	Holder string
	// Prepared is told the number of prepared claims whenever it is read
	// or saved (the prepared-claims gauge); nil: not told.
	Prepared func(n int)
	Logger   *slog.Logger
}

// State is the checkpoint of prepared claims and their CDI specs.
type State struct {
	opts    Options
	devices Devices
	log     *slog.Logger
	cdi     *cdi.Cache
	holder  string

	mu   sync.Mutex // guards last; the files behind it are guarded by the checkpoint lock (Update)
	last *checkpoint.State
}

// New loads the checkpoint (a corrupt one is an error: the prepared claims
// it held must not be forgotten), creates the CDI dir and reports
// overlapping holds in the lock's journal.
func New(devices Devices, opts Options) (*State, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	last, err := checkpoint.Load(opts.StateDir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(opts.CDIDir, 0o755); err != nil {
		return nil, fmt.Errorf("create cdi dir %s: %w", opts.CDIDir, err)
	}
	cache, err := cdi.NewCache(cdi.WithSpecDirs(opts.CDIDir), cdi.WithAutoRefresh(false))
	if err != nil {
		return nil, fmt.Errorf("cdi cache %s: %w", opts.CDIDir, err)
	}
	holder := opts.Holder
	if holder == "" {
		holder = fmt.Sprintf("pid-%d", os.Getpid())
	}
	s := &State{opts: opts, devices: devices, log: log, cdi: cache, holder: holder, last: last}
	s.prepared(len(last.Claims))
	s.checkJournal()
	return s, nil
}

// prepared tells Options.Prepared the number of prepared claims.
func (s *State) prepared(n int) {
	if s.opts.Prepared != nil {
		s.opts.Prepared(n)
	}
}

// Current is a copy of the checkpoint as it is on disk, read without the
// lock (a save renames a complete file into place); the last state this
// instance saw when the file cannot be read.
func (s *State) Current() *checkpoint.State {
	cur, err := checkpoint.Load(s.opts.StateDir)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.log.Warn("cannot read the checkpoint; using the last state read", "err", err)
		return s.last.Clone()
	}
	s.last = cur
	s.prepared(len(cur.Claims)) // the other instance's changes count too
	return cur.Clone()
}

// Update is the one way the checkpoint changes. Under the state dir's lock
// (checkpoint.Acquire) it reloads the checkpoint, since the other pod of a
// rolling update may have written it, runs fn on a copy, and saves the
// copy when fn reports a change. An error from fn, or from the save,
// leaves the checkpoint as it was. fn may write and remove CDI specs: they
// change under the same lock.
func (s *State) Update(ctx context.Context, op string, fn func(*checkpoint.State) (bool, error)) error {
	return s.updateOrUndo(ctx, op, fn, nil)
}

// saveState saves the checkpoint; tests replace it to make a save fail.
var saveState = checkpoint.Save

// specRemovedHook, when set (tests only), runs right after Prepare removed
// the spec of a claim whose checkpoint save failed.
var specRemovedHook func()

// updateOrUndo is Update, running undo (when not nil) under the lock
// when fn changed the state and the save failed: what fn did outside the
// state (a spec written) is taken back before another instance can look.
func (s *State) updateOrUndo(ctx context.Context, op string, fn func(*checkpoint.State) (bool, error), undo func()) error {
	l, err := checkpoint.Acquire(ctx, s.opts.StateDir, s.holder, op)
	if err != nil {
		return err
	}
	defer s.release(l)
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, err := checkpoint.Load(s.opts.StateDir)
	if err != nil {
		return err
	}
	s.last = cur
	work := cur.Clone()
	changed, err := fn(work)
	if err != nil || !changed {
		return err
	}
	if err := saveState(s.opts.StateDir, work); err != nil {
		if undo != nil {
			undo()
		}
		return err
	}
	s.last = work
	s.prepared(len(work.Claims))
	return nil
}

// release drops the lock and logs the hold: holder, operation, times.
func (s *State) release(l *checkpoint.Lock) {
	rec, err := l.Release()
	if err != nil {
		s.log.Warn("checkpoint lock journal", "err", err)
	}
	level := slog.LevelDebug
	if l.Waited() > 100*time.Millisecond {
		level = slog.LevelInfo // another instance held it: a rolling update
	}
	s.log.Log(context.Background(), level, "checkpoint lock released", "holder", rec.Holder, "op", rec.Op,
		"acquired", rec.Acquired.UTC().Format(time.RFC3339Nano), "released", rec.Released.UTC().Format(time.RFC3339Nano), "waited", l.Waited())
}

// checkJournal reads the checkpoint lock's journal at start and logs an
// error when two holds in it overlapped: two driver pods (a rolling
// update) then wrote the checkpoint at once, and the operator should know
// before trusting it. A missing journal is a first start.
func (s *State) checkJournal() {
	path := filepath.Join(s.opts.StateDir, checkpoint.JournalName)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	if err != nil {
		s.log.Warn("cannot read the checkpoint lock journal", "file", path, "err", err)
		return
	}
	recs, err := checkpoint.ParseJournal(data)
	if err != nil {
		s.log.Warn("checkpoint lock journal does not parse", "file", path, "err", err)
		return
	}
	if a, b, overlap := checkpoint.Overlap(recs); overlap {
		s.log.Error("checkpoint lock journal shows two overlapping holds", "file", path, "first", a.String(), "second", b.String())
	}
}

// Stamp tells checkpoint files apart: a save renames a new file into
// place, so the inode changes with every save.
type Stamp struct {
	ino   uint64
	mtime time.Time
	size  int64
}

// Stamp is the checkpoint file's stamp, zero when it is missing: the
// publisher compares stamps to see the other instance's saves.
func (s *State) Stamp() Stamp {
	st, err := os.Stat(filepath.Join(s.opts.StateDir, checkpoint.FileName))
	if err != nil {
		return Stamp{}
	}
	out := Stamp{mtime: st.ModTime(), size: st.Size()}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		out.ino = sys.Ino
	}
	return out
}

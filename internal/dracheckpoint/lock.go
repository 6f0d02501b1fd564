package dracheckpoint

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/hyperaccel/lpu-node/internal/atomicfile"
	"github.com/hyperaccel/lpu-node/internal/statedir"
)

// LockName is the lock file's name in the state directory. Every writer of
// the checkpoint holds its flock for the whole read-modify-write: during a
// rolling update the old and the new lpu-dra pod run side by side on one
// state directory.
const LockName = "dra-checkpoint.lock"

// JournalName is the lock journal's name in the state directory: one line
// per time the lock was held, written before it is released, so that a
// test (or an operator) can check that two holders never overlapped.
const JournalName = "dra-lock.log"

// journalMax is the journal size above which it is rotated to
// JournalName+".1": a few thousand records, the last ones kept.
const journalMax = 1 << 20

// lockPoll is how often Acquire retries a lock another holder has.
const lockPoll = 5 * time.Millisecond

// Lock is the held lock of a state directory.
type Lock struct {
	f        *os.File
	dir      string
	holder   string
	op       string
	acquired time.Time
	waited   time.Duration
}

// Acquire takes the exclusive lock of dir for holder (the pod UID, say)
// doing op ("prepare", "unprepare", ...), waiting until it is free or ctx
// ends. The lock is a flock on dir/LockName: the kernel drops it when the
// holder dies, so a crashed driver never leaves the directory locked.
func Acquire(ctx context.Context, dir, holder, op string) (*Lock, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create state dir %s: %w", dir, err)
	}
	resolved, err := statedir.Check(dir)
	if err != nil {
		return nil, fmt.Errorf("lock checkpoint: %w", err)
	}
	path := filepath.Join(resolved, LockName)
	f, err := statedir.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock %s: %w", path, err)
	}
	start := time.Now()
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, context.Cause(ctx))
		case <-time.After(lockPoll):
		}
	}
	now := time.Now()
	return &Lock{f: f, dir: resolved, holder: holder, op: op, acquired: now, waited: now.Sub(start)}, nil
}

// Acquired is when the lock was taken.
func (l *Lock) Acquired() time.Time { return l.acquired }

// Waited is how long Acquire waited for another holder.
func (l *Lock) Waited() time.Duration { return l.waited }

// Release appends the hold to the journal and drops the lock. The record
// is written while the lock is still held, so records never interleave.
// A journal that cannot be written does not keep the lock: the error is
// returned after the lock is gone.
func (l *Lock) Release() (Record, error) {
	rec := Record{Holder: l.holder, Op: l.op, Acquired: l.acquired, Released: time.Now()}
	jerr := appendJournal(l.dir, rec)
	if err := l.f.Close(); err != nil { // closing the last fd drops the flock
		return rec, fmt.Errorf("unlock %s: %w", filepath.Join(l.dir, LockName), err)
	}
	return rec, jerr
}

// appendJournal writes rec as one line, rotating a full journal first.
func appendJournal(dir string, rec Record) error {
	path := filepath.Join(dir, JournalName)
	if st, err := os.Lstat(path); err == nil && st.Size() > journalMax {
		// The journal is a record for people and tests, not state: its
		// rotation need not be durable.
		if err := atomicfile.Rename(path, path+".1", atomicfile.WithoutSync()); err != nil {
			return fmt.Errorf("rotate lock journal %s: %w", path, err)
		}
	}
	f, err := statedir.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("open lock journal %s: %w", path, err)
	}
	if _, err := f.WriteString(rec.String() + "\n"); err != nil {
		f.Close()
		return fmt.Errorf("write lock journal %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write lock journal %s: %w", path, err)
	}
	return nil
}

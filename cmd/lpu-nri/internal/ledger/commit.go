package ledger

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/hyperaccel/lpu-node/internal/atomicfile"
)

// Group commit. Every method here runs with l.mu held; flush releases it
// while fdatasync runs, so Claims arriving meanwhile write their batches
// and are made durable together by the next flush.

// testHook, when set (tests only), is called at the named steps of a
// commit and a compaction, so a test process can be killed between them.
var testHook func(step string)

func hook(step string) {
	if testHook != nil {
		testHook(step)
	}
}

// mustCompact reports whether the log has to be replaced before a batch
// of up to need bytes is written.
func (l *Ledger) mustCompact(need int) bool {
	return l.dirty || l.batches >= compactAfter || l.tail+int64(need) > walSize
}

// settle compacts until a batch of need bytes fits (need is capped at
// half the log: a larger batch is committed by a compaction, commit). It
// may release mu (waiting for a running flush): callers check the entries
// after it.
func (l *Ledger) settle(need int) error {
	need = min(need, walSize/2)
	for l.mustCompact(need) {
		if l.flushing {
			l.cond.Wait()
			continue
		}
		if err := l.compact(); err != nil {
			return err
		}
	}
	return nil
}

// commit writes recs as one batch at the log's tail and applies them in
// memory, returning the batch's number for durable. On a write error
// nothing is applied. A batch too large for the log is applied and left
// to the compaction durable runs.
func (l *Ledger) commit(recs []record) (uint64, error) {
	line, err := encodeBatch(recs)
	if err != nil {
		return 0, err
	}
	if l.tail+int64(len(line)) > walSize {
		l.dirty = true
	} else {
		if _, err := l.wal.WriteAt(line, l.tail); err != nil {
			l.dirty = true // maybe half written: the next batch goes to a new log
			return 0, fmt.Errorf("allocation ledger: write %s: %w", l.walPath, err)
		}
		l.tail += int64(len(line))
		l.batches++
	}
	l.seq++
	for _, r := range recs {
		l.apply(r, l.seq)
	}
	hook("written")
	return l.seq, nil
}

// durable returns once batch seq is on disk: after a fdatasync that began
// after it was written (run by this caller, or by the one flushing when
// it arrived), or a compaction. A failed fdatasync makes the log
// untrusted (the kernel may have dropped the pages it could not write, and
// a later fdatasync would then succeed without them), so what it covered
// is made durable by a compaction into a new log instead.
func (l *Ledger) durable(seq uint64) error {
	for l.synced < seq {
		switch {
		case l.flushing:
			l.cond.Wait()
		case l.dirty:
			if err := l.compact(); err != nil {
				return err
			}
		default:
			if err := l.flush(); err != nil {
				return err
			}
		}
	}
	return nil
}

// flush runs one fdatasync for every batch written so far, without mu.
func (l *Ledger) flush() error {
	target, f := l.seq, l.wal
	l.flushing = true
	l.mu.Unlock()
	err := unix.Fdatasync(int(f.Fd()))
	l.mu.Lock()
	l.flushing = false
	l.flushes++
	if err != nil {
		l.dirty = true
	} else if target > l.synced {
		l.synced = target
	}
	l.cond.Broadcast()
	if err != nil {
		return fmt.Errorf("allocation ledger: sync %s: %w", l.walPath, err)
	}
	return nil
}

// compact writes every entry to the snapshot (atomicfile) and replaces the
// log with an empty one of the next generation, made before the snapshot
// names it. A crash after the snapshot leaves the old log, whose records
// it holds; Open ignores that log by its generation. No flush may be
// running.
func (l *Ledger) compact() error {
	gen := l.gen + 1
	f, err := createWAL(l.dir, gen)
	if err != nil {
		l.dirty = true
		return err
	}
	hook("wal-created")
	data, err := json.Marshal(file{Version: 1, WAL: gen, Allocations: l.entries})
	if err == nil {
		err = atomicfile.Write(l.path, data, atomicfile.WithMode(0o600), stateOwner())
	}
	if err != nil {
		f.Close()
		os.Remove(f.Name())
		l.dirty = true
		return fmt.Errorf("allocation ledger: %w", err)
	}
	// Every entry is durable in the snapshot now, and the old log is stale.
	l.gen, l.synced = gen, l.seq
	l.cond.Broadcast()
	hook("snapshot-written")
	if err := l.installWAL(f); err != nil {
		l.dirty = true
		return err
	}
	if err := os.Remove(filepath.Join(l.dir, LogName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("allocation ledger: remove the old log: %w", err)
	}
	return nil
}

// installWAL renames the new log f into place and makes it the one
// batches go to.
func (l *Ledger) installWAL(f *os.File) error {
	if err := atomicfile.Rename(f.Name(), l.walPath); err != nil {
		f.Close()
		os.Remove(f.Name()) // gone already when only the directory sync failed
		return fmt.Errorf("allocation ledger: %w", err)
	}
	if l.wal != nil {
		l.wal.Close()
	}
	l.wal = f
	l.tail, l.batches, l.dirty = int64(len(walHeader(l.gen))), 0, false
	return nil
}

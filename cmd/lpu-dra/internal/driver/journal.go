package driver

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	checkpoint "github.com/hyperaccel/lpu-node/internal/dracheckpoint"
)

// checkJournal reads the checkpoint lock's journal at start and logs an
// error when two holds in it overlapped: two driver pods (a rolling
// update) then wrote the checkpoint at once, and the operator should know
// before trusting it. A missing journal is a first start.
func (d *Driver) checkJournal() {
	path := filepath.Join(d.opts.StateDir, checkpoint.JournalName)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	if err != nil {
		d.log.Warn("cannot read the checkpoint lock journal", "file", path, "err", err)
		return
	}
	recs, err := checkpoint.ParseJournal(data)
	if err != nil {
		d.log.Warn("checkpoint lock journal does not parse", "file", path, "err", err)
		return
	}
	if a, b, overlap := checkpoint.Overlap(recs); overlap {
		d.log.Error("checkpoint lock journal shows two overlapping holds", "file", path, "first", a.String(), "second", b.String())
	}
}

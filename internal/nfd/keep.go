package nfd

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/hyperaccel/lpu-node/internal/health"
	"github.com/hyperaccel/lpu-node/internal/logchange"
	"github.com/hyperaccel/lpu-node/pkg/device"
)

// Source is the inventory the file follows; *health.Monitor implements it.
type Source interface {
	Ready() <-chan struct{}
	Snapshot() (health.Snapshot, <-chan struct{})
}

// Flag is --nfd-features-file, declared once (startup.DeclareNFD) for
// every daemon that writes the file.
type Flag struct {
	// File is the flag's value; "" disables the file.
	File string
	// Given is true when the flag or its environment twin was given
	// (otherwise Path picks the default by mode).
	Given bool
}

// Path picks the feature file: the flag when given ("" disables);
// otherwise the default, inside root when root is a marked tree
// (device.TreePath: its features stay inside it), else only when its
// directory exists (NFD installed).
func (f Flag) Path(root string, log *slog.Logger) string {
	if f.Given {
		return f.File
	}
	if p, ok := device.TreePath(root, f.File); ok {
		return p
	}
	if _, err := os.Stat(filepath.Dir(f.File)); err != nil {
		log.Info("not writing the NFD feature file: its directory is absent (NFD not installed?)", "file", f.File)
		return ""
	}
	return f.File
}

// Keep keeps the feature file at path in line with src's inventory until
// ctx ends: written once the first discovery ran, rewritten when the
// features change and every Refresh (renewing the expiry). A failing
// write is logged once per change and retried; Keep returns nil.
func Keep(ctx context.Context, src Source, path, resource string, log *slog.Logger) error {
	select {
	case <-src.Ready():
	case <-ctx.Done():
		return nil
	}
	var last []string
	var errs logchange.Errors
	written, due := false, false
	refresh := time.NewTicker(Refresh) // renews the file's expiry
	defer refresh.Stop()
	for {
		snap, changed := src.Snapshot()
		if lines := Features(resource, snap.Inventory); !written || due || !slices.Equal(lines, last) {
			ok, err := Write(path, Expiring(lines, time.Now().Add(Lifetime)))
			if errs.Note(err) == logchange.Failed {
				log.Warn("cannot write the NFD feature file", "file", path, "err", err)
			}
			if err == nil {
				if ok && (!written || !slices.Equal(lines, last)) {
					log.Info("wrote the NFD feature file", "file", path, "features", lines)
				}
				last, written, due = lines, true, false
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-refresh.C:
			due = true
		}
	}
}

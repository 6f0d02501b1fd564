package atomicfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// Option changes how Write and Create make the file.
type Option func(*options)

type options struct {
	perm     fs.FileMode
	uid, gid int // -1: leave as created
	verify   func(tmpPath string) error
	noSync   bool
}

// WithMode sets the file's permission bits (default 0600), whatever the
// umask.
func WithMode(perm fs.FileMode) Option {
	return func(o *options) { o.perm = perm.Perm() }
}

// WithOwner sets the file's owner and group; -1 leaves either as created
// (the process's).
func WithOwner(uid, gid int) Option {
	return func(o *options) { o.uid, o.gid = uid, gid }
}

// WithVerify runs check on the complete, synced temp file before it is
// renamed into place; an error leaves the target untouched.
func WithVerify(check func(tmpPath string) error) Option {
	return func(o *options) { o.verify = check }
}

// WithoutSync skips both fsyncs, keeping only the atomic rename: for
// trees that stand in for sysfs (devicesim's, test trees), which
// a reboot does not keep either and which are written by the hundred.
func WithoutSync() Option {
	return func(o *options) { o.noSync = true }
}

// Seams for the tests: a full disk is a failing writer, and the directory
// fsync is observable.
var (
	wrapWriter = func(w io.Writer) io.Writer { return w }
	syncDir    = func(d *os.File) error { return d.Sync() }
)

// Write replaces path with data durably (see the package doc).
func Write(path string, data []byte, opts ...Option) error {
	return WriteFrom(path, bytes.NewReader(data), opts...)
}

// WriteFrom is Write with the content streamed from r, for files too big
// to hold in memory (a daemon's own binary).
func WriteFrom(path string, r io.Reader, opts ...Option) error {
	tmp, err := writeTemp(path, r, opts)
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return syncDirUnless(filepath.Dir(path), opts)
}

// Create makes path with data durably unless something exists there: then
// it returns an error wrapping fs.ErrExist and leaves it alone. Two
// processes creating the same path at once cannot both succeed.
func Create(path string, data []byte, opts ...Option) error {
	tmp, err := writeTemp(path, bytes.NewReader(data), opts)
	if err != nil {
		return err
	}
	defer os.Remove(tmp) // the link keeps the content under path
	if err := os.Link(tmp, path); err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	if err := os.Remove(tmp); err != nil {
		return fmt.Errorf("create %s: remove temp %s: %w", path, tmp, err)
	}
	return syncDirUnless(filepath.Dir(path), opts)
}

// Symlink makes path a symbolic link to target, replacing what is there
// atomically, and makes the new name durable (WithoutSync is the only
// option it heeds).
func Symlink(target, path string, opts ...Option) error {
	tmp, err := tempName(path)
	if err != nil {
		return err
	}
	if err := os.Symlink(target, tmp); err != nil {
		return fmt.Errorf("symlink %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("symlink %s: %w", path, err)
	}
	return syncDirUnless(filepath.Dir(path), opts)
}

// Rename moves the complete file oldPath (written and synced by its
// owner, e.g. a preallocated log) to newPath, replacing what is there
// atomically, and makes the new name durable (WithoutSync is the only
// option it heeds).
func Rename(oldPath, newPath string, opts ...Option) error {
	if err := os.Rename(oldPath, newPath); err != nil {
		return fmt.Errorf("rename %s: %w", newPath, err)
	}
	return syncDirUnless(filepath.Dir(newPath), opts)
}

// syncDirUnless is SyncDir unless opts hold WithoutSync.
func syncDirUnless(dir string, opts []Option) error {
	if apply(opts).noSync {
		return nil
	}
	return SyncDir(dir)
}

// apply returns the options with their defaults.
func apply(opts []Option) options {
	o := options{perm: 0o600, uid: -1, gid: -1}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// SyncDir fsyncs directory dir, making the names created, renamed or
// removed in it durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	defer d.Close()
	if err := syncDir(d); err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}

// writeTemp writes r's content to a new temp file next to path with the options'
// mode and owner, syncs and verifies it, and returns its name. On error
// nothing is left behind.
func writeTemp(path string, r io.Reader, opts []Option) (name string, err error) {
	o := apply(opts)
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".*.tmp")
	if err != nil {
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err := f.Chmod(o.perm); err != nil {
		return "", fmt.Errorf("write %s: chmod temp: %w", path, err)
	}
	if o.uid != -1 || o.gid != -1 {
		if err := f.Chown(o.uid, o.gid); err != nil {
			return "", fmt.Errorf("write %s: chown temp: %w", path, err)
		}
	}
	if _, err := io.Copy(wrapWriter(f), r); err != nil {
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	if !o.noSync {
		if err := f.Sync(); err != nil {
			return "", fmt.Errorf("write %s: sync: %w", path, err)
		}
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("write %s: close: %w", path, err)
	}
	if o.verify != nil {
		if err := o.verify(f.Name()); err != nil {
			return "", fmt.Errorf("write %s: %w", path, err)
		}
	}
	return f.Name(), nil
}

// tempName returns an unused name next to path for a temp symlink.
func tempName(path string) (string, error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	// Reserve a unique name with CreateTemp, then free it for the symlink.
	f, err := os.CreateTemp(dir, "."+base+".*.tmp")
	if err != nil {
		return "", fmt.Errorf("symlink %s: %w", path, err)
	}
	f.Close()
	if err := os.Remove(f.Name()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("symlink %s: %w", path, err)
	}
	return f.Name(), nil
}

package devicesim

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync/atomic"

	"github.com/hyperaccel/lpu-node/internal/atomicfile"
)

// writer writes files under root, keeping the first error.
type writer struct {
	root string
	err  error
}

func (w *writer) fail(err error) {
	if w.err == nil {
		w.err = err
	}
}

func (w *writer) mkdir(hostDir string) {
	if w.err == nil {
		w.fail(os.MkdirAll(filepath.Join(w.root, hostDir), 0o755))
	}
}

// tmpSeq makes temporary names unique within the process; the pid makes
// them unique between processes.
var tmpSeq atomic.Uint64

func tmpName(path string) string {
	return filepath.Join(filepath.Dir(path),
		fmt.Sprintf(".%s.%d.%d.tmp", filepath.Base(path), os.Getpid(), tmpSeq.Add(1)))
}

// writeTemp writes content to a new temporary file next to path and returns
// its name.
func writeTemp(path, content string, perm fs.FileMode) (string, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", err
	}
	tmp := tmpName(path)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return "", err
	}
	_, err = f.WriteString(content)
	if err == nil {
		err = f.Chmod(perm) // umask-proof
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return "", err
	}
	return tmp, nil
}

// file makes hostPath hold exactly content with mode perm, replacing it
// atomically unless it already does.
func (w *writer) file(hostPath, content string, perm fs.FileMode) {
	if w.err != nil {
		return
	}
	path := filepath.Join(w.root, hostPath)
	if fi, err := os.Lstat(path); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm() == perm && fi.Size() == int64(len(content)) {
		if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, []byte(content)) {
			return
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		w.fail(err)
		return
	}
	if err := atomicfile.Write(path, []byte(content), atomicfile.WithMode(perm), atomicfile.WithoutSync()); err != nil {
		w.fail(err)
	}
}

// create makes hostPath with content unless something already exists there;
// the file appears atomically (hard link of a complete temporary file).
func (w *writer) create(hostPath, content string, perm fs.FileMode) {
	if w.err != nil {
		return
	}
	path := filepath.Join(w.root, hostPath)
	if _, err := os.Lstat(path); err == nil {
		return
	}
	tmp, err := writeTemp(path, content, perm)
	if err != nil {
		w.fail(err)
		return
	}
	defer os.Remove(tmp)
	if err := os.Link(tmp, path); err != nil && !errors.Is(err, fs.ErrExist) {
		w.fail(err)
	}
}

// symlink makes hostPath a symbolic link to target, atomically.
func (w *writer) symlink(target, hostPath string) {
	if w.err != nil {
		return
	}
	path := filepath.Join(w.root, hostPath)
	if old, err := os.Readlink(path); err == nil && old == target {
		return
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		w.fail(err)
		return
	}
	if err := atomicfile.Symlink(target, path, atomicfile.WithoutSync()); err != nil {
		w.fail(err)
	}
}

// keepOnly removes every entry of hostDir but name.
func (w *writer) keepOnly(hostDir, name string) {
	if w.err != nil {
		return
	}
	entries, err := os.ReadDir(filepath.Join(w.root, hostDir))
	if err != nil {
		w.fail(err)
		return
	}
	for _, e := range entries {
		if e.Name() != name {
			w.fail(os.RemoveAll(filepath.Join(w.root, hostDir, e.Name())))
		}
	}
}

func (w *writer) remove(hostPath string) {
	if err := os.Remove(filepath.Join(w.root, hostPath)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		w.fail(err)
	}
}

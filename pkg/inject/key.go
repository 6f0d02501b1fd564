package inject

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
)

// KeyFileName is the seal key's file name under the state directory.
const KeyFileName = "seal.key"

// KeySize is the length of the seal key in bytes.
const KeySize = 32

// Key is the node-local secret both daemons use to seal and verify the
// allocation annotation. It lives in <stateDir>/seal.key on the host, so it
// survives restarts of both daemons (kubelet replays checkpointed
// annotations on container restart without calling Allocate).
type Key struct {
	secret [KeySize]byte
	path   string
	macs   sync.Pool // of hash.Hash keyed with secret
}

// NewKey returns a key from raw bytes (tests, tools). b must be KeySize
// bytes.
func NewKey(b []byte) (*Key, error) {
	if len(b) != KeySize {
		return nil, fmt.Errorf("seal key is %d bytes, want %d", len(b), KeySize)
	}
	k := &Key{}
	copy(k.secret[:], b)
	return k, nil
}

// Path returns the file the key was loaded from, "" for NewKey keys.
func (k *Key) Path() string { return k.path }

// LoadOrCreateKey loads <stateDir>/seal.key, creating it first when absent.
// Creation is atomic and safe when both daemons start at once: 32 random
// bytes go to a private temp file that is then hard-linked to the final
// name; whoever loses the link race loads the winner's file. A key file that
// is not a regular file, is readable or writable by group or others, or is
// not exactly KeySize bytes is refused with an error naming path and mode.
func LoadOrCreateKey(stateDir string) (*Key, error) {
	if stateDir == "" {
		return nil, errors.New("seal key: state dir is empty")
	}
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return nil, fmt.Errorf("seal key: create state dir %s: %w", stateDir, err)
	}
	path := filepath.Join(stateDir, KeyFileName)
	k, err := loadKey(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return k, err
	}
	if err := createKey(stateDir, path); err != nil {
		return nil, err
	}
	return loadKey(path)
}

// createKey writes a fresh key to a temp file and links it to path. An
// existing path (another process won the race) is not an error.
func createKey(dir, path string) error {
	var secret [KeySize]byte
	if _, err := io.ReadFull(rand.Reader, secret[:]); err != nil {
		return fmt.Errorf("seal key: random: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".seal.key.*.tmp") // mode 0600
	if err != nil {
		return fmt.Errorf("seal key: create temp in %s: %w", dir, err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("seal key: chmod %s: %w", tmp.Name(), err)
	}
	if _, err := tmp.Write(secret[:]); err != nil {
		tmp.Close()
		return fmt.Errorf("seal key: write %s: %w", tmp.Name(), err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("seal key: sync %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("seal key: close %s: %w", tmp.Name(), err)
	}
	if err := os.Link(tmp.Name(), path); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("seal key: link %s: %w", path, err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync() // make the new name durable; best effort
		d.Close()
	}
	return nil
}

func loadKey(path string) (*Key, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		return nil, fmt.Errorf("seal key %s: %w", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("seal key %s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("seal key %s: mode %v is not a regular file", path, st.Mode())
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("seal key %s: mode %#o allows group/other access, want 0600 (chmod 600 %s)", path, perm, path)
	}
	if st.Size() != KeySize {
		return nil, fmt.Errorf("seal key %s: size %d bytes, want %d (mode %#o)", path, st.Size(), KeySize, st.Mode().Perm())
	}
	k := &Key{path: path}
	if _, err := io.ReadFull(f, k.secret[:]); err != nil {
		return nil, fmt.Errorf("seal key %s: read: %w", path, err)
	}
	return k, nil
}

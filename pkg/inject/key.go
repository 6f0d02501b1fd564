package inject

import (
	"crypto/rand"
	"encoding/hex"
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
	node   string    // node name v2 seals cover; "" until ForNode
	macs   sync.Pool // of hash.Hash keyed with secret
}

// MaxNodeNameLen bounds a node name (a DNS subdomain).
const MaxNodeNameLen = 253

// ForNode returns a key with the same secret bound to a node name: its v2
// seals (AnnotationsWithID) cover the name, and it opens v2 seals only when
// they were made for that name. Both daemons bind the key to the same name
// (NODE_NAME, else the host name). The name must be 1 to MaxNodeNameLen
// printable ASCII characters without spaces, so the MAC input splits only
// one way.
func (k *Key) ForNode(node string) (*Key, error) {
	if err := CheckNodeName(node); err != nil {
		return nil, err
	}
	return &Key{secret: k.secret, path: k.path, node: node}, nil
}

// CheckNodeName reports whether node can be sealed over (see ForNode).
func CheckNodeName(node string) error {
	if node == "" {
		return errors.New("seal key: node name is empty (set NODE_NAME)")
	}
	if len(node) > MaxNodeNameLen {
		return fmt.Errorf("seal key: node name is %d bytes, limit %d", len(node), MaxNodeNameLen)
	}
	for i := 0; i < len(node); i++ {
		if c := node[i]; c <= ' ' || c >= 0x7f {
			return fmt.Errorf("seal key: node name %q: byte %d %q is not printable ASCII", node, i, c)
		}
	}
	return nil
}

// Node returns the node name the key is bound to, "" when unbound.
func (k *Key) Node() string { return k.node }

// Fingerprint returns a short public identifier of the secret: the first 16
// hex digits of HMAC-SHA256(key, "lpu.hyperaccel.ai/fingerprint"). Two nodes
// with the same fingerprint share a key (a cloned image); the value reveals
// nothing usable about the key.
func (k *Key) Fingerprint() string {
	return hex.EncodeToString(k.macFingerprint()[:8])
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
// is not a regular file, is readable or writable by group or others, is not
// owned by the process's effective uid, has more than one link, or is not
// exactly KeySize bytes is refused with an error naming path and mode; so
// is a state dir that group or others can write or another uid owns (they
// could swap the key); a symlinked state dir is resolved and its target
// checked, and the key is made in the target.
func LoadOrCreateKey(stateDir string) (*Key, error) {
	if stateDir == "" {
		return nil, errors.New("seal key: state dir is empty")
	}
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return nil, fmt.Errorf("seal key: create state dir %s: %w", stateDir, err)
	}
	dir, err := statedir.Check(stateDir)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, KeyFileName)
	k, err := loadSettled(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return k, err
	}
	if err := createKey(path); err != nil {
		return nil, err
	}
	return loadSettled(path)
}

// loadSettled is loadKey that waits up to about half a second for a second
// link to go: a daemon creating the key at the same moment links its temp
// file to the final name and removes the temp name right after.
func loadSettled(path string) (*Key, error) {
	for i := 0; ; i++ {
		k, err := loadKey(path)
		if !errors.Is(err, statedir.ErrLinks) || i == 50 {
			return k, err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// createKey makes path hold a fresh key, exclusively and durably
// (atomicfile.Create: a private temp file hard-linked to path). An
// existing path (another process won the race) is not an error.
func createKey(path string) error {
	var secret [KeySize]byte
	if _, err := io.ReadFull(rand.Reader, secret[:]); err != nil {
		return fmt.Errorf("seal key: random: %w", err)
	}
	if err := atomicfile.Create(path, secret[:], atomicfile.WithMode(0o600), atomicfile.WithOwner(os.Geteuid(), os.Getegid())); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("seal key: %w", err)
	}
	return nil
}

// CheckStateDir refuses a state dir that is not a directory, that group
// or others can write (anyone who can rename files in it can replace the
// seal key or the readiness socket), or that another uid owns; a symlink
// is resolved and its target checked (statedir.Check).
func CheckStateDir(dir string) error {
	_, err := statedir.Check(dir)
	return err
}

func loadKey(path string) (*Key, error) {
	f, err := statedir.Open(path)
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
	if st.Size() != KeySize {
		return nil, fmt.Errorf("seal key %s: size %d bytes, want %d (mode %#o)", path, st.Size(), KeySize, st.Mode().Perm())
	}
	k := &Key{path: path}
	if _, err := io.ReadFull(f, k.secret[:]); err != nil {
		return nil, fmt.Errorf("seal key %s: read: %w", path, err)
	}
	return k, nil
}

// NodeName returns the node name both daemons bind the seal key to:
// NODE_NAME from getenv (the chart sets it from spec.nodeName), else the
// host name. They must agree, or every seal fails to open.
func NodeName(getenv func(string) string) (string, error) {
	if n := getenv("NODE_NAME"); n != "" {
		return n, CheckNodeName(n)
	}
	h, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("node name: NODE_NAME unset and no host name: %w", err)
	}
	return h, CheckNodeName(h)
}

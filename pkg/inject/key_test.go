package inject

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/hyperaccel/lpu-node/internal/statedir"
)

func TestLoadOrCreateKey(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	k1, err := LoadOrCreateKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, KeyFileName)
	if k1.Path() != path {
		t.Errorf("Path = %q, want %q", k1.Path(), path)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 || st.Size() != KeySize {
		t.Errorf("key file mode %v size %d, want 0600 and %d", st.Mode(), st.Size(), KeySize)
	}
	raw, _ := os.ReadFile(path)
	if bytes.Equal(raw, make([]byte, KeySize)) {
		t.Error("key is all zeros")
	}
	// A restart loads the same key: seals made before still open.
	k2, err := LoadOrCreateKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	b1, err1 := k1.ForNode("n1")
	b2, err2 := k2.ForNode("n1")
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	ann, err := b1.AnnotationsWithID([]string{"lpu3"}, NewAllocationID())
	if err != nil {
		t.Fatal(err)
	}
	if ids, err := b2.Open(ann); err != nil || EncodeIDs(ids) != "lpu3" {
		t.Errorf("reloaded key: Open = %q, %v", ids, err)
	}
	// No temp files left behind.
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("state dir holds %d entries, want only %s", len(entries), KeyFileName)
	}
}

func TestLoadOrCreateKeyRefuses(t *testing.T) {
	tests := map[string]struct {
		setup   func(t *testing.T, path string)
		wantErr []string
		is      error // what the error wraps, when there is a sentinel
	}{
		"group readable": {func(t *testing.T, p string) { writeKey(t, p, KeySize, 0o640) }, []string{"mode 0640", "allows group/other"}, nil},
		"other readable": {func(t *testing.T, p string) { writeKey(t, p, KeySize, 0o604) }, []string{"mode 0604"}, nil},
		"short":          {func(t *testing.T, p string) { writeKey(t, p, KeySize-1, 0o600) }, []string{"size 31 bytes, want 32"}, nil},
		"long":           {func(t *testing.T, p string) { writeKey(t, p, KeySize+1, 0o600) }, []string{"size 33 bytes, want 32"}, nil},
		"empty":          {func(t *testing.T, p string) { writeKey(t, p, 0, 0o600) }, []string{"size 0 bytes"}, nil},
		"directory": {func(t *testing.T, p string) {
			if err := os.Mkdir(p, 0o700); err != nil {
				t.Fatal(err)
			}
		}, []string{"not a regular file"}, nil},
		"other owner": {func(t *testing.T, p string) {
			writeKey(t, p, KeySize, 0o600)
			if os.Geteuid() != 0 {
				t.Skip("chown needs root")
			}
			if err := os.Chown(p, os.Geteuid()+1000, -1); err != nil {
				t.Fatal(err)
			}
		}, []string{"owned by uid", "the daemon's uid"}, nil},
		"hard link": {func(t *testing.T, p string) {
			writeKey(t, p, KeySize, 0o600)
			if err := os.Link(p, p+".other"); err != nil {
				t.Fatal(err)
			}
		}, []string{"more than one link (2)"}, statedir.ErrLinks},
		"symlink": {func(t *testing.T, p string) {
			target := p + ".real"
			writeKey(t, target, KeySize, 0o600)
			if err := os.Symlink(target, p); err != nil {
				t.Fatal(err)
			}
		}, []string{KeyFileName}, nil},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, KeyFileName)
			tc.setup(t, path)
			k, err := LoadOrCreateKey(dir)
			if err == nil {
				t.Fatalf("LoadOrCreateKey accepted it: %v", k)
			}
			if !strings.Contains(err.Error(), path) {
				t.Errorf("error %q does not name %s", err, path)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("error %q does not wrap %v", err, tc.is)
			}
		})
	}
	if _, err := LoadOrCreateKey(""); err == nil {
		t.Error("empty state dir accepted")
	}
	for _, mode := range []os.FileMode{0o770, 0o757, 0o777} {
		dir := t.TempDir()
		if err := os.Chmod(dir, mode); err != nil {
			t.Fatal(err)
		}
		if k, err := LoadOrCreateKey(dir); err == nil || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "lets group/others write") {
			t.Errorf("state dir mode %#o: LoadOrCreateKey = %v, %v; want a refusal naming %s", mode, k, err, dir)
		}
		if _, err := os.Stat(filepath.Join(dir, KeyFileName)); err == nil {
			t.Errorf("state dir mode %#o: a key was created", mode)
		}
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreateKey(dir); err != nil {
		t.Errorf("state dir mode 0755: %v", err)
	}
}

func writeKey(t *testing.T, path string, size int, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, bytes.Repeat([]byte{9}, size), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil { // umask-proof
		t.Fatal(err)
	}
}

// TestLoadOrCreateKeyRace: daemons starting at the same time all end up
// with the one key on disk.
func TestLoadOrCreateKeyRace(t *testing.T) {
	for round := range 20 {
		dir := filepath.Join(t.TempDir(), "state")
		const n = 8
		keys := make([]*Key, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				keys[i], errs[i] = LoadOrCreateKey(dir)
			}()
		}
		close(start)
		wg.Wait()
		onDisk, err := os.ReadFile(filepath.Join(dir, KeyFileName))
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if errs[i] != nil {
				t.Fatalf("round %d goroutine %d: %v", round, i, errs[i])
			}
			if !bytes.Equal(keys[i].secret[:], onDisk) {
				t.Fatalf("round %d goroutine %d holds a key that is not the one on disk", round, i)
			}
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 1 {
			t.Fatalf("round %d: %d entries in state dir, want 1", round, len(entries))
		}
	}
}

func TestNewKey(t *testing.T) {
	if _, err := NewKey(make([]byte, 16)); err == nil || !strings.Contains(err.Error(), "16 bytes, want 32") {
		t.Errorf("NewKey(16 bytes) err = %v", err)
	}
}

// TestLoadOrCreateKeyStateDirOwner: a state dir another uid owns, or a
// symlink to one, is refused before a key is made in it; a symlink to the
// daemon's own dir is resolved and the key made in the target.
func TestLoadOrCreateKeyStateDirOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown to another uid needs root")
	}
	tests := map[string]struct {
		owner   int  // of the real directory
		symlink bool // the state dir is a symlink to it
		want    string
	}{
		"owned by 65534":            {owner: 65534, want: "owned by uid 65534"},
		"symlink to one of 65534's": {owner: 65534, symlink: true, want: "owned by uid 65534"},
		"symlink to our own":        {owner: 0, symlink: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			base := t.TempDir()
			real := filepath.Join(base, "real")
			if err := os.Mkdir(real, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(real, tc.owner, tc.owner); err != nil {
				t.Fatal(err)
			}
			stateDir := real
			if tc.symlink {
				stateDir = filepath.Join(base, "link")
				if err := os.Symlink(real, stateDir); err != nil {
					t.Fatal(err)
				}
			}
			k, err := LoadOrCreateKey(stateDir)
			_, statErr := os.Stat(filepath.Join(real, KeyFileName))
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), stateDir) {
					t.Errorf("LoadOrCreateKey = %v, %v; want a refusal naming %s with %q", k, err, stateDir, tc.want)
				}
				if statErr == nil {
					t.Error("a key was created in the refused dir")
				}
				return
			}
			if err != nil || statErr != nil {
				t.Fatalf("LoadOrCreateKey = %v; key in target: %v", err, statErr)
			}
			if k.Path() != filepath.Join(real, KeyFileName) {
				t.Errorf("key path %s, want it in the resolved dir %s", k.Path(), real)
			}
		})
	}
}

package atomicfile

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"testing/iotest"

	"golang.org/x/sys/unix"
)

// countSyncs counts directory fsyncs for the rest of the test.
func countSyncs(t *testing.T) *int {
	t.Helper()
	n := 0
	old := syncDir
	syncDir = func(d *os.File) error { n++; return old(d) }
	t.Cleanup(func() { syncDir = old })
	return &n
}

// noTemps fails when a temp file is left in dir.
func noTemps(t *testing.T, dir string) {
	t.Helper()
	if m, _ := filepath.Glob(filepath.Join(dir, ".*.tmp")); len(m) != 0 {
		t.Errorf("temp files left: %v", m)
	}
}

func TestWrite(t *testing.T) {
	tests := map[string]struct {
		opts     []Option
		old      string // "" creates a new file
		wantPerm fs.FileMode
	}{
		"new, default mode":      {wantPerm: 0o600},
		"new, 0644":              {opts: []Option{WithMode(0o644)}, wantPerm: 0o644},
		"replace, mode changes":  {old: "old", opts: []Option{WithMode(0o640)}, wantPerm: 0o640},
		"replace, default again": {old: "old", wantPerm: 0o600},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "f")
			if tc.old != "" {
				if err := os.WriteFile(path, []byte(tc.old), 0o666); err != nil {
					t.Fatal(err)
				}
			}
			syncs := countSyncs(t)
			old := syscall.Umask(0o077) // the mode must not depend on it
			defer syscall.Umask(old)
			if err := Write(path, []byte("new"), tc.opts...); err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(path)
			if err != nil || string(got) != "new" {
				t.Fatalf("content %q, %v", got, err)
			}
			fi, _ := os.Stat(path)
			if fi.Mode().Perm() != tc.wantPerm {
				t.Errorf("mode %#o, want %#o", fi.Mode().Perm(), tc.wantPerm)
			}
			if *syncs != 1 {
				t.Errorf("directory fsyncs %d, want 1", *syncs)
			}
			noTemps(t, dir)
		})
	}
}

func TestWriteOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown to another uid needs root")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	if err := Write(path, []byte("x"), WithOwner(65534, 65533), WithMode(0o644)); err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(path)
	st := fi.Sys().(*syscall.Stat_t)
	if st.Uid != 65534 || st.Gid != 65533 || fi.Mode().Perm() != 0o644 {
		t.Errorf("owner %d:%d mode %#o, want 65534:65533 0644", st.Uid, st.Gid, fi.Mode().Perm())
	}
}

// failWriter writes up to n bytes and then fails as a full disk does.
type failWriter struct {
	w io.Writer
	n int
}

func (f *failWriter) Write(p []byte) (int, error) {
	if len(p) <= f.n {
		f.n -= len(p)
		return f.w.Write(p)
	}
	k, _ := f.w.Write(p[:f.n])
	f.n = 0
	return k, syscall.ENOSPC
}

// asNobody runs fn with the thread's file-system uid set to 65534, so the
// permission checks apply even when the test runs as root (setting a
// non-zero fsuid drops CAP_DAC_OVERRIDE for the thread).
func asNobody(t *testing.T, fn func()) {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	prev, err := unix.SetfsuidRetUid(65534)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = unix.Setfsuid(prev) }()
	fn()
}

// errInvalidSpec is what TestWriteFailureKeepsOld's verify step returns.
var errInvalidSpec = errors.New("invalid spec")

func TestWriteFailureKeepsOld(t *testing.T) {
	tests := map[string]struct {
		setup func(t *testing.T, dir string) // before the write
		write func(path string) error
		want  error // what the error wraps
	}{
		"read-only directory": {
			setup: func(t *testing.T, dir string) {
				if err := os.Chmod(dir, 0o555); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = os.Chmod(dir, 0o755) })
			},
			write: func(path string) (err error) {
				asNobody(t, func() { err = Write(path, []byte("new content")) })
				return err
			},
			want: fs.ErrPermission,
		},
		"full disk": {
			setup: func(t *testing.T, _ string) {
				old := wrapWriter
				wrapWriter = func(w io.Writer) io.Writer { return &failWriter{w: w, n: 3} }
				t.Cleanup(func() { wrapWriter = old })
			},
			write: func(path string) error { return Write(path, []byte("new content")) },
			want:  syscall.ENOSPC,
		},
		"verify refuses": {
			write: func(path string) error {
				return Write(path, []byte("new content"), WithVerify(func(tmp string) error {
					if b, err := os.ReadFile(tmp); err != nil || string(b) != "new content" {
						return errors.New("verify saw the wrong bytes")
					}
					return errInvalidSpec
				}))
			},
			want: errInvalidSpec,
		},
		"source read fails midway": {
			write: func(path string) error {
				r := io.MultiReader(strings.NewReader("new con"), iotest.ErrReader(syscall.EIO))
				return WriteFrom(path, r, WithMode(0o755))
			},
			want: syscall.EIO,
		},
		"create over existing": {
			write: func(path string) error { return Create(path, []byte("new content")) },
			want:  fs.ErrExist,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "f")
			if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
				t.Fatal(err)
			}
			if tc.setup != nil {
				tc.setup(t, dir)
			}
			err := tc.write(path)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), path) {
				t.Fatalf("err = %v, want one naming %s and wrapping %v", err, path, tc.want)
			}
			if got, _ := os.ReadFile(path); string(got) != "old" {
				t.Errorf("target is %q, want the old content", got)
			}
			noTemps(t, dir)
		})
	}
}

func TestCreate(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "key")
	syncs := countSyncs(t)
	if err := Create(path, []byte("secret")); err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(path)
	if st := fi.Sys().(*syscall.Stat_t); st.Nlink != 1 || fi.Mode().Perm() != 0o600 {
		t.Errorf("links %d mode %#o, want 1 and 0600", st.Nlink, fi.Mode().Perm())
	}
	if err := Create(path, []byte("other")); !errors.Is(err, fs.ErrExist) {
		t.Errorf("second Create = %v, want fs.ErrExist", err)
	}
	if got, _ := os.ReadFile(path); string(got) != "secret" {
		t.Errorf("content %q after a second Create", got)
	}
	if *syncs != 1 {
		t.Errorf("directory fsyncs %d, want 1", *syncs)
	}
	noTemps(t, dir)
}

func TestSymlink(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "link")
	syncs := countSyncs(t)
	for _, target := range []string{"a", "b"} {
		if err := Symlink(target, path); err != nil {
			t.Fatal(err)
		}
		if got, err := os.Readlink(path); err != nil || got != target {
			t.Errorf("link -> %q, %v; want %q", got, err, target)
		}
	}
	if *syncs != 2 {
		t.Errorf("directory fsyncs %d, want 2", *syncs)
	}
	noTemps(t, dir)
}

package statedir

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("chown to another uid needs root")
	}
}

func TestCheck(t *testing.T) {
	needRoot(t)
	tests := map[string]struct {
		setup func(t *testing.T, dir string) string // returns the dir to check
		want  string                                // "" accepts
	}{
		"own, 0700": {setup: func(t *testing.T, dir string) string { chmod(t, dir, 0o700); return dir }},
		"own, 0755": {setup: func(t *testing.T, dir string) string { chmod(t, dir, 0o755); return dir }},
		"group-writable": {
			setup: func(t *testing.T, dir string) string { chmod(t, dir, 0o775); return dir },
			want:  "lets group/others write",
		},
		"owned by 65534, 0755": {
			setup: func(t *testing.T, dir string) string { chown(t, dir, 65534); chmod(t, dir, 0o755); return dir },
			want:  "owned by uid 65534, want 0",
		},
		"symlink to a dir owned by 65534": {
			setup: func(t *testing.T, dir string) string {
				target := filepath.Join(dir, "target")
				mkdir(t, target)
				chown(t, target, 65534)
				link := filepath.Join(dir, "link")
				if err := os.Symlink(target, link); err != nil {
					t.Fatal(err)
				}
				return link
			},
			want: "owned by uid 65534",
		},
		"symlink to a group-writable dir": {
			setup: func(t *testing.T, dir string) string {
				target := filepath.Join(dir, "target")
				mkdir(t, target)
				chmod(t, target, 0o777)
				link := filepath.Join(dir, "link")
				if err := os.Symlink(target, link); err != nil {
					t.Fatal(err)
				}
				return link
			},
			want: "lets group/others write",
		},
		"not a directory": {
			setup: func(t *testing.T, dir string) string {
				p := filepath.Join(dir, "f")
				if err := os.WriteFile(p, nil, 0o600); err != nil {
					t.Fatal(err)
				}
				return p
			},
			want: "not a directory",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			dir := tc.setup(t, t.TempDir())
			resolved, err := Check(dir)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Check = %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), dir) {
				t.Fatalf("Check(%s) = %q, %v; want an error naming it with %q", dir, resolved, err, tc.want)
			}
		})
	}
}

func TestCheckResolves(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "target")
	mkdir(t, target)
	link := filepath.Join(dir, "link")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	got, err := Check(link)
	if err != nil || got != target {
		t.Errorf("Check(link) = %q, %v; want %q", got, err, target)
	}
}

func TestOpen(t *testing.T) {
	needRoot(t)
	tests := map[string]struct {
		setup func(t *testing.T, path string)
		want  string
		is    error // what the error wraps, when there is a sentinel
	}{
		"own, 0600": {},
		"0644":      {setup: func(t *testing.T, p string) { chmod(t, p, 0o644) }, want: "mode 0644 allows group/other access"},
		"owned by 65534": {
			setup: func(t *testing.T, p string) { chown(t, p, 65534) },
			want:  "owned by uid 65534",
		},
		"hard-linked": {
			setup: func(t *testing.T, p string) {
				if err := os.Link(p, p+".2"); err != nil {
					t.Fatal(err)
				}
			},
			want: "more than one link",
			is:   ErrLinks,
		},
		"symlink": {
			setup: func(t *testing.T, p string) {
				other := p + ".real"
				if err := os.Rename(p, other); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(other, p); err != nil {
					t.Fatal(err)
				}
			},
			want: "too many levels of symbolic links",
			is:   syscall.ELOOP, // O_NOFOLLOW
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "state")
			if err := os.WriteFile(path, []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
			if tc.setup != nil {
				tc.setup(t, path)
			}
			f, err := Open(path)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				f.Close()
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || (tc.is != nil && !errors.Is(err, tc.is)) {
				t.Fatalf("Open = %v, want %q (wrapping %v)", err, tc.want, tc.is)
			}
		})
	}
	if _, err := Open(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v, want ErrNotExist", err)
	}
}

func chmod(t *testing.T, p string, m os.FileMode) {
	t.Helper()
	if err := os.Chmod(p, m); err != nil {
		t.Fatal(err)
	}
}

func chown(t *testing.T, p string, uid int) {
	t.Helper()
	if err := os.Chown(p, uid, -1); err != nil {
		t.Fatal(err)
	}
}

func mkdir(t *testing.T, p string) {
	t.Helper()
	if err := os.Mkdir(p, 0o700); err != nil {
		t.Fatal(err)
	}
}

// ReadFile returns a file up to its limit, refuses a longer one with
// *TooLargeError, passes fs.ErrNotExist on, and applies Open's checks.
func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state")
	if _, err := ReadFile(path, 8); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing file: err %v, want fs.ErrNotExist", err)
	}
	if err := os.WriteFile(path, []byte("12345678"), 0o600); err != nil {
		t.Fatal(err)
	}
	if data, err := ReadFile(path, 8); err != nil || string(data) != "12345678" {
		t.Fatalf("at the limit: %q %v", data, err)
	}
	var large *TooLargeError
	if _, err := ReadFile(path, 7); !errors.As(err, &large) || large.Limit != 7 || err.Error() != "larger than 7 bytes" {
		t.Fatalf("over the limit: err %v, want larger than 7 bytes", err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFile(path, 8); err == nil {
		t.Fatal("a group-readable state file was read")
	}
}

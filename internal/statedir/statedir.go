package statedir

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// ErrLinks marks a state file with more than one link.
var ErrLinks = errors.New("more than one link")

// Check resolves dir's symbolic links and refuses a target that is not a
// directory, is not owned by the process's effective uid, or that group or
// others can write (anyone who can rename files in it can replace the seal
// key, the ledger or the readiness socket). It returns the resolved path.
func Check(dir string) (string, error) {
	resolved, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", fmt.Errorf("state dir %s: %w", dir, err)
	}
	name := dir
	if resolved != filepath.Clean(dir) {
		name = fmt.Sprintf("%s (-> %s)", dir, resolved)
	}
	st, err := os.Stat(resolved)
	if err != nil {
		return "", fmt.Errorf("state dir %s: %w", name, err)
	}
	if !st.IsDir() {
		return "", fmt.Errorf("state dir %s: mode %v is not a directory", name, st.Mode())
	}
	if perm := st.Mode().Perm(); perm&0o022 != 0 {
		return "", fmt.Errorf("state dir %s: mode %#o lets group/others write, want at most 0755 (chmod go-w %s)", name, perm, resolved)
	}
	if uid, ok := owner(st); ok && uid != os.Geteuid() {
		return "", fmt.Errorf("state dir %s: owned by uid %d, want %d (the daemon's uid; chown %d %s)", name, uid, os.Geteuid(), os.Geteuid(), resolved)
	}
	return resolved, nil
}

// CheckFile refuses st, the state file at path, unless it is a regular
// file owned by the effective uid, with no group/other permission bits
// and one link (errors wrapping ErrLinks otherwise). The error does not
// repeat path's role; callers prefix it ("seal key %s: %w").
func CheckFile(path string, st fs.FileInfo) error {
	if !st.Mode().IsRegular() {
		return fmt.Errorf("mode %v is not a regular file", st.Mode())
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Errorf("mode %#o allows group/other access, want 0600 (chmod 600 %s)", perm, path)
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	if uid := os.Geteuid(); int(sys.Uid) != uid {
		return fmt.Errorf("owned by uid %d, want %d (the daemon's uid)", sys.Uid, uid)
	}
	if sys.Nlink != 1 {
		return fmt.Errorf("%w (%d), want 1: another name could change it", ErrLinks, sys.Nlink)
	}
	return nil
}

// Open opens the state file at path for reading without following a
// final symlink and checks it with CheckFile. A missing file is an error
// wrapping fs.ErrNotExist.
func Open(path string) (*os.File, error) {
	return OpenFile(path, os.O_RDONLY, 0)
}

// OpenFile is Open with flags and a creation mode (os.OpenFile's); a file
// it creates is checked too.
func OpenFile(path string, flag int, perm fs.FileMode) (*os.File, error) {
	f, err := os.OpenFile(path, flag|syscall.O_NOFOLLOW, perm)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err == nil {
		err = CheckFile(path, st)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func owner(st fs.FileInfo) (int, bool) {
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(sys.Uid), true
}

// TooLargeError is ReadFile's refusal of a state file over its limit.
type TooLargeError struct{ Limit int64 }

// Error says the limit.
func (e *TooLargeError) Error() string { return fmt.Sprintf("larger than %d bytes", e.Limit) }

// ReadFile reads the state file at path after Open's checks, up to limit
// bytes; a longer file is a *TooLargeError, a missing one an error
// wrapping fs.ErrNotExist. Like CheckFile, errors do not name path's role:
// callers prefix it.
func ReadFile(path string, limit int64) ([]byte, error) {
	f, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, &TooLargeError{Limit: limit}
	}
	return data, nil
}

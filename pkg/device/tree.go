package device

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// tree reads the host's files under a discovery root: what every backend
// shares. It remembers only which warnings were already logged, so it is
// safe for concurrent use.
type tree struct {
	root string
	log  *slog.Logger
	// standIns accepts regular files as device nodes: set only for a
	// marked root (IsMarkedTree), never inferred from the root's path.
	standIns bool

	warned  sync.Map // warning text → struct{}: each distinct warning is logged once
	nWarned atomic.Int64
}

// under maps a host path to the path read under the root.
func (t *tree) under(hostPath string) string { return filepath.Join(t.root, hostPath) }

// maxWarned bounds the memory of warnings already given.
const maxWarned = 1024

// warn logs a warning about the node's files once per distinct message and
// attributes (Discover runs every few seconds; a persistent oddity is not
// news every time), and at debug level after that.
func (t *tree) warn(msg string, args ...any) { t.once(slog.LevelWarn, msg, args...) }

// note is warn at info level: a fact about the node worth saying once.
func (t *tree) note(msg string, args ...any) { t.once(slog.LevelInfo, msg, args...) }

func (t *tree) once(level slog.Level, msg string, args ...any) {
	key := msg + fmt.Sprint(args...)
	if _, seen := t.warned.Load(key); seen || t.nWarned.Load() >= maxWarned {
		t.log.Debug(msg, args...)
		return
	}
	if _, seen := t.warned.LoadOrStore(key, struct{}{}); seen {
		t.log.Debug(msg, args...)
		return
	}
	t.nWarned.Add(1)
	t.log.Log(context.Background(), level, msg, args...)
}

// exists reports whether hostPath exists under the root (lstat).
func (t *tree) exists(hostPath string) bool {
	_, err := os.Lstat(t.under(hostPath))
	return err == nil
}

// textAt reads a free-text attribute at a host path; "" when absent.
func (t *tree) textAt(id, host string) string {
	v, err := readAttr(t.under(host))
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			t.warn("ignoring attribute", "device", id, "err", describeErr("read", host, err))
		}
		return ""
	}
	return cleanText(v)
}

// numaAt reads a numa_node attribute; -1 when absent or bad (warned).
func (t *tree) numaAt(id, host string) int {
	v, err := readAttr(t.under(host))
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			t.warn("ignoring numa_node", "device", id, "err", describeErr("read", host, err))
		}
		return -1
	}
	n, err := parseNUMA(v)
	if err != nil {
		t.warn("ignoring numa_node", "device", id, "file", host, "value", clip(v), "err", err)
	}
	return n
}

// prefixed returns the name of the first directory (by name) in hostDir
// named "<name>.<something>": XRT's subdevices are "rom.u.<inst>",
// "xmc.u.<inst>" with an instance that varies by version, and a plain file
// "rom" may sit beside them, so a bare prefix never matches. "" when none.
func (t *tree) prefixed(hostDir, name string) string {
	entries, err := os.ReadDir(t.under(hostDir))
	if err != nil {
		return ""
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), name+".") && len(e.Name()) > len(name)+1 {
			if fi, err := os.Stat(filepath.Join(t.under(hostDir), e.Name())); err == nil && fi.IsDir() {
				return e.Name()
			}
		}
	}
	return ""
}

// numberedEntries returns the entries of hostDir named prefix followed by
// a decimal (renderD128, hwmon3), by number, not by name (hwmon10 after
// hwmon3).
func (t *tree) numberedEntries(hostDir, prefix string) []string {
	entries, err := os.ReadDir(t.under(hostDir))
	if err != nil {
		return nil
	}
	type numbered struct {
		name string
		n    int64
	}
	var found []numbered
	for _, e := range entries {
		if rest, ok := strings.CutPrefix(e.Name(), prefix); ok {
			if n, err := parseDecimal(rest, 1<<20); err == nil {
				found = append(found, numbered{e.Name(), n})
			}
		}
	}
	slices.SortFunc(found, func(a, b numbered) int { return int(a.n - b.n) })
	names := make([]string, len(found))
	for i, f := range found {
		names[i] = f.name
	}
	return names
}

// numberedEntry is the first of numberedEntries, "" when none.
func (t *tree) numberedEntry(hostDir, prefix string) string {
	if names := t.numberedEntries(hostDir, prefix); len(names) > 0 {
		return names[0]
	}
	return ""
}

// readNode reads the dev attribute of a node's sysfs directory and checks
// the node at nodePath, whose major the kernel must have registered to
// driver. It returns the node (numbers 0 when unknown) and a health
// reason, "" when the node is usable.
func (t *tree) readNode(devAttr, nodePath, driver string) (Node, string) {
	n := Node{Path: nodePath}
	v, err := readAttr(t.under(devAttr))
	if err != nil {
		return n, "dev attribute " + describeErr("read", devAttr, err)
	}
	ma, mi, err := ParseDev(v)
	if err != nil {
		return n, fmt.Sprintf("dev attribute %s: %v", devAttr, err)
	}
	n.Major, n.Minor = ma, mi
	if err := t.checkNode(nodePath, ma, mi, true); err != nil {
		return n, err.Error()
	}
	if err := t.checkMajor(nodePath, ma, driver); err != nil {
		return n, err.Error()
	}
	return n, ""
}

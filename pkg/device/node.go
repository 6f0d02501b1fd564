package device

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// ProcDevices lists the device majors the kernel has registered and the
// driver holding each. It is read under the root; on a real root where it
// is absent there (a host mounted without /proc), the process's own
// /proc/devices is read instead: the list is global to the kernel, not
// namespaced.
const ProcDevices = "/proc/devices"

// maxProcDevicesBytes bounds the read of /proc/devices (a few KiB on a
// real kernel).
const maxProcDevicesBytes = 1 << 16

// checkNode checks that the device node at hostPath is a character device
// whose number is major:minor (known false: only its type is checked). A
// regular file stands in for the node only under a marked root (standIns),
// never on a host, whatever the root's path. The error says what is wrong
// in host paths; nil means the node is usable.
func (t *tree) checkNode(hostPath string, major, minor int64, known bool) error {
	fi, err := os.Lstat(t.under(hostPath))
	if err != nil {
		return fmt.Errorf("device node %s", describeErr("stat", hostPath, err))
	}
	mode := fi.Mode()
	switch {
	case mode&fs.ModeDevice != 0 && mode&fs.ModeCharDevice != 0:
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok || !known {
			return nil
		}
		ma, mi := int64(unix.Major(uint64(st.Rdev))), int64(unix.Minor(uint64(st.Rdev))) //nolint:unconvert // Rdev is not uint64 everywhere
		if ma != major || mi != minor {
			return fmt.Errorf("device node %s is %d:%d but sysfs says %d:%d", hostPath, ma, mi, major, minor)
		}
		return nil
	case mode.IsRegular() && t.standIns:
		return nil // a stand-in, under a marked root
	case mode.IsRegular():
		return fmt.Errorf("device node %s is not a character device but a regular file (stand-ins only under a root carrying %s)", hostPath, TreeMarker)
	case mode&fs.ModeDevice != 0:
		return fmt.Errorf("device node %s is a block device, want a character device", hostPath)
	default:
		return fmt.Errorf("device node %s is not a character device", hostPath)
	}
}

// checkMajor checks that the kernel registered major to driver in
// /proc/devices: a device number sysfs and /dev agree on (1:1, /dev/mem)
// is still not an LPU's unless its driver holds the major. driver "" is
// not checked.
func (t *tree) checkMajor(nodePath string, major int64, driver string) error {
	if driver == "" {
		return nil
	}
	buf := procBufs.Get().(*[maxProcDevicesBytes]byte)
	defer procBufs.Put(buf)
	data, err := t.readProcDevices(buf[:])
	if err != nil {
		return fmt.Errorf("major %d of %s: %w", major, nodePath, err)
	}
	names := majorNames(data, major)
	switch {
	case slices.Contains(names, driver):
		return nil
	case len(names) == 0:
		return fmt.Errorf("major %d of %s is not registered in %s, want driver %s", major, nodePath, ProcDevices, driver)
	default:
		return fmt.Errorf("major %d of %s is registered to %s in %s, want driver %s",
			major, nodePath, clip(strings.Join(names, ",")), ProcDevices, driver)
	}
}

// procBufs recycles the read buffers of checkMajor: ProbeHealth runs it
// on every poll.
var procBufs = sync.Pool{New: func() any { return new([maxProcDevicesBytes]byte) }}

// readProcDevices reads /proc/devices under the root into buf (on a real
// root without one, the process's own). A longer file is cut at len(buf).
func (t *tree) readProcDevices(buf []byte) ([]byte, error) {
	f, err := openRegular(t.under(ProcDevices))
	if errors.Is(err, fs.ErrNotExist) && !t.standIns && t.root != "/" {
		f, err = openRegular(ProcDevices)
	}
	if err != nil {
		return nil, errors.New(describeErr("read", ProcDevices, err))
	}
	defer f.Close()
	n, err := io.ReadFull(f, buf)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		return nil, errors.New(describeErr("read", ProcDevices, err))
	}
	return buf[:n], nil
}

// majorNames returns the drivers the "Character devices:" section of
// /proc/devices registers major under (a major may be registered more
// than once, for different minor ranges). Lines that do not parse are
// skipped.
func majorNames(data []byte, major int64) []string {
	var names []string
	inChar := false
	for len(data) > 0 {
		var line []byte
		line, data, _ = bytes.Cut(data, []byte("\n"))
		line = bytes.TrimSpace(line)
		if bytes.HasSuffix(line, []byte(":")) {
			inChar = string(line) == "Character devices:"
			continue
		}
		num, name, ok := bytes.Cut(line, []byte(" "))
		if !inChar || !ok {
			continue
		}
		if n, err := parseDecimal(string(num), MaxMajor); err == nil && n == major {
			if name = bytes.TrimSpace(name); len(name) > 0 {
				names = append(names, string(name))
			}
		}
	}
	return names
}

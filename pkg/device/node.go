package device

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
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
// regular file stands in for the node only on a simulated root (standIns),
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
		return nil // a stand-in on a simulated node
	case mode.IsRegular():
		return fmt.Errorf("device node %s is not a character device but a regular file (stand-ins only on a simulated node)", hostPath)
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
	majors, err := t.registeredMajors()
	if err != nil {
		return fmt.Errorf("major %d of %s: %w", major, nodePath, err)
	}
	names := majors[major]
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

// registeredMajors reads the character majors of /proc/devices.
func (t *tree) registeredMajors() (map[int64][]string, error) {
	data, err := readBounded(t.under(ProcDevices), maxProcDevicesBytes)
	if errors.Is(err, fs.ErrNotExist) && !t.standIns && t.root != "/" {
		data, err = readBounded(ProcDevices, maxProcDevicesBytes)
	}
	if err != nil {
		return nil, errors.New(describeErr("read", ProcDevices, err))
	}
	return parseProcDevices(data), nil
}

// parseProcDevices returns the "Character devices:" section of
// /proc/devices as major → driver names (a major may be registered more
// than once, for different minor ranges). Lines that do not parse are
// skipped.
func parseProcDevices(data []byte) map[int64][]string {
	majors := map[int64][]string{}
	inChar := false
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasSuffix(line, ":") {
			inChar = line == "Character devices:"
			continue
		}
		num, name, ok := strings.Cut(line, " ")
		if !inChar || !ok {
			continue
		}
		n, err := parseDecimal(num, MaxMajor)
		if name = strings.TrimSpace(name); err != nil || name == "" {
			continue
		}
		majors[n] = append(majors[n], name)
	}
	return majors
}

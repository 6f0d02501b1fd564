package device

import (
	"fmt"
	"io/fs"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// checkNode checks that the device node at hostPath is a character device
// whose number is major:minor (known false: only its type is checked).
// Under a root other than "/" (a simulated node, a test tree) a regular
// file may stand in for the node; on a host it never does. The error says
// what is wrong in host paths; nil means the node is usable.
func (s *Sysfs) checkNode(hostPath string, major, minor int64, known bool) error {
	fi, err := os.Lstat(s.under(hostPath))
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
	case mode.IsRegular() && s.root != "/":
		return nil // a stand-in under a simulated or test root
	case mode&fs.ModeDevice != 0:
		return fmt.Errorf("device node %s is a block device, want a character device", hostPath)
	default:
		return fmt.Errorf("device node %s is not a character device", hostPath)
	}
}

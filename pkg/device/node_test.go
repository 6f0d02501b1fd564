package device

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestCheckNode checks what may stand for a device node: a character
// device with the sysfs number anywhere; a regular file only on a
// simulated root, never on a real one, "/" or not (issue 21: the
// DaemonSet's root is /host).
func TestCheckNode(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "lpu0")
	if err := os.WriteFile(file, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o666); err != nil {
		t.Fatal(err)
	}
	canMknod := unix.Mknod(filepath.Join(dir, "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))) == nil
	tests := map[string]struct {
		root, host   string
		major, minor int64
		needMknod    bool
		simulated    bool
		err          string
	}{
		"plain file on a simulated root": {root: dir, host: "/lpu0", simulated: true},
		"plain file on a real root":      {root: dir, host: "/lpu0", err: "device node /lpu0 is not a character device but a regular file"},
		"plain file on the host":         {root: "/", host: file, err: "is not a character device"},
		"fifo under a test root":         {root: dir, host: "/fifo", err: "/fifo is not a character device"},
		"missing":                        {root: dir, host: "/lpu9", err: "device node /lpu9 missing"},
		"char device, right number":      {root: "/", host: filepath.Join(dir, "null"), major: 1, minor: 3, needMknod: true},
		"char device, wrong number":      {root: dir, host: "/null", major: 1, minor: 5, needMknod: true, err: "device node /null is 1:3 but sysfs says 1:5"},
		"char device on the host, same":  {root: "/", host: "/dev/null", major: 1, minor: 3},
		"directory":                      {root: dir, host: "/", err: "is not a character device"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if tc.needMknod && !canMknod {
				t.Skip("mknod needs CAP_MKNOD")
			}
			if tc.simulated {
				if err := os.WriteFile(filepath.Join(tc.root, TreeMarker), nil, 0o644); err != nil {
					t.Fatal(err)
				}
				defer os.Remove(filepath.Join(tc.root, TreeMarker))
			}
			s := NewSysfs(tc.root)
			err := s.checkNode(tc.host, tc.major, tc.minor, true)
			if (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("checkNode(%s under %s) = %v, want %q", tc.host, tc.root, err, tc.err)
			}
			if err != nil && tc.root != "/" && strings.Contains(err.Error(), tc.root) {
				t.Fatalf("error names the root: %v", err)
			}
		})
	}
}

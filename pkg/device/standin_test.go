package device_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hyperaccel/lpu-node/pkg/device"
)

// TestStandInNodesOnlyWhenSimulated: a tree under a root other than "/"
// whose /dev/lpu0 is a regular file is a real root (the DaemonSet's /host)
// unless it carries the simulation marker as a regular file: the LPU is
// unhealthy there.
func TestStandInNodesOnlyWhenSimulated(t *testing.T) {
	tests := map[string]struct {
		marker  string // "file", "dir" or "link": what TreeMarker is; "": none
		opts    []device.Option
		healthy bool
	}{
		"real root, not /":         {},
		"simulated (marker file)":  {marker: "file", healthy: true},
		"marker is a directory":    {marker: "dir"},
		"marker is a link":         {marker: "link"},
		"real root, other options": {opts: []device.Option{device.WithStateDir(t.TempDir())}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir() // written by hand: neither devicesim nor devicetest marks it
			write(t, filepath.Join(root, device.ClassDir, "lpu0", "dev"), "509:0\n")
			write(t, filepath.Join(root, device.ClassDir, "lpu0", "status"), "READY\n")
			write(t, filepath.Join(root, "/dev/lpu0"), "")
			write(t, filepath.Join(root, device.ProcDevices), "Character devices:\n509 lpu\n")
			marker := filepath.Join(root, device.TreeMarker)
			switch tc.marker {
			case "file":
				write(t, marker, "")
			case "dir":
				if err := os.Mkdir(marker, 0o755); err != nil {
					t.Fatal(err)
				}
			case "link":
				write(t, filepath.Join(root, "elsewhere"), "")
				if err := os.Symlink("elsewhere", marker); err != nil {
					t.Fatal(err)
				}
			}
			if got := device.IsMarkedTree(root); got != tc.healthy {
				t.Errorf("IsMarkedTree = %v, want %v", got, tc.healthy)
			}
			opts := append([]device.Option{device.WithLogger(quiet)}, tc.opts...)
			inv, err := device.NewSysfs(root, opts...).Discover(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			h := inv.Devices[0].Health
			if h.Healthy != tc.healthy || !tc.healthy && !strings.Contains(h.Reason, "/dev/lpu0 is not a character device but a regular file") {
				t.Fatalf("health %+v, want healthy %v", h, tc.healthy)
			}
		})
	}
}

// TestIsMarkedTreeNeverOnSlash: "/" is never a marked tree, whatever files
// it has; "" is "/".
func TestIsMarkedTreeNeverOnSlash(t *testing.T) {
	for _, root := range []string{"/", "", "//", "/."} {
		if device.IsMarkedTree(root) {
			t.Errorf("IsMarkedTree(%q) = true", root)
		}
	}
}

// TestTreePath: a node's host path resolves inside the root only when the
// root is marked; an unmarked directory and "/" leave it to the host.
func TestTreePath(t *testing.T) {
	marked, plain := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(marked, device.TreeMarker), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	const p = "/usr/lib/liblpu.so"
	if got, ok := device.TreePath(marked, p); !ok || got != filepath.Join(marked, p) {
		t.Errorf("TreePath(marked) = %q, %v; want %q, true", got, ok, filepath.Join(marked, p))
	}
	for _, root := range []string{plain, "/"} {
		if got, ok := device.TreePath(root, p); ok || got != "" {
			t.Errorf("TreePath(%q) = %q, %v; want \"\", false", root, got, ok)
		}
	}
}

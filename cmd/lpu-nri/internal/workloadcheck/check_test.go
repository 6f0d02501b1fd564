package workloadcheck

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// mknod makes a real character node (we run as root).
func mknod(t *testing.T, path string, major, minor uint32) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mknod(path, unix.S_IFCHR|0o666, int(unix.Mkdev(major, minor))); err != nil {
		t.Skipf("mknod %s: %v (needs root)", path, err)
	}
}

// devDir is a container's /dev: the standard nodes plus what was injected.
func devDir(t *testing.T, dir string) string {
	t.Helper()
	mknod(t, filepath.Join(dir, "null"), 1, 3)
	mknod(t, filepath.Join(dir, "zero"), 1, 5)
	mknod(t, filepath.Join(dir, "pts", "0"), 136, 0)
	mknod(t, filepath.Join(dir, "pts", "ptmx"), 5, 2)
	return dir
}

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// TestCheck: the env must name the LPUs asked for, and /dev must hold at
// least as many injected nodes, each openable.
func TestCheck(t *testing.T) {
	granted := map[string]string{"NUM_LPU_DEVICES": "2", "LPU_VISIBLE_DEVICES": "7,0"}
	simulated := devDir(t, t.TempDir())
	mknod(t, filepath.Join(simulated, "lpu7"), 240, 7) // no driver for 240: ENXIO
	mknod(t, filepath.Join(simulated, "lpu0"), 240, 0)
	served := devDir(t, t.TempDir())
	mknod(t, filepath.Join(served, "lpu7"), 1, 3) // a node some driver serves
	mknod(t, filepath.Join(served, "dri", "renderD128"), 1, 5)
	bare := devDir(t, t.TempDir())
	crowded := devDir(t, t.TempDir()) // a host's /dev: never opened
	for i := range 9 {
		mknod(t, filepath.Join(crowded, "watchdog"+strconv.Itoa(i)), 240, uint32(i))
	}
	one := devDir(t, t.TempDir())
	mknod(t, filepath.Join(one, "lpu7"), 240, 7)

	for name, tc := range map[string]struct {
		want   int
		env    map[string]string
		dev    string
		pass   bool
		saying string
	}{
		"granted on a simulated node":   {2, granted, simulated, true, "no driver serves it"},
		"granted, nodes a driver opens": {2, granted, served, true, "opened"},
		"asked for more":                {4, granted, simulated, false, `NUM_LPU_DEVICES="2" (want 4)`},
		"no env (not injected)":         {2, nil, simulated, false, "no LPU visible"},
		"visible none":                  {2, map[string]string{"NUM_LPU_DEVICES": "2", "LPU_VISIBLE_DEVICES": "none"}, simulated, false, "no LPU visible"},
		"an index twice":                {2, map[string]string{"NUM_LPU_DEVICES": "2", "LPU_VISIBLE_DEVICES": "7,7"}, simulated, false, "listed twice"},
		"not an index":                  {2, map[string]string{"NUM_LPU_DEVICES": "2", "LPU_VISIBLE_DEVICES": "7,lpu0"}, simulated, false, "not an LPU index"},
		"env but no nodes":              {2, granted, bare, false, "0 injected device node(s)"},
		"fewer nodes than LPUs":         {2, granted, one, false, "1 injected device node(s)"},
		"a host's /dev":                 {2, granted, crowded, false, "nothing opened"},
		"no such dir":                   {2, granted, filepath.Join(bare, "missing"), false, "list "},
	} {
		t.Run(name, func(t *testing.T) {
			r := Run(tc.want, tc.dev, env(tc.env))
			text := strings.Join(r.Lines, "\n")
			if r.Failed == tc.pass || !strings.Contains(text, tc.saying) {
				t.Fatalf("failed=%v, want pass=%v, saying %q:\n%s", r.Failed, tc.pass, tc.saying, text)
			}
			if strings.Contains(text, filepath.Join(tc.dev, "null")) || strings.Contains(text, "pts") {
				t.Fatalf("standard nodes counted as injected:\n%s", text)
			}
		})
	}
}

// TestCheckRefusedOpen: a node the kernel refuses to open before any driver
// runs fails the check. A nodev mount refuses like the device cgroup does
// (EACCES at open), which a test can set up without a container.
func TestCheckRefusedOpen(t *testing.T) {
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NODEV, "size=1m"); err != nil {
		t.Skipf("mount a nodev tmpfs: %v (needs root)", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	devDir(t, dir)
	mknod(t, filepath.Join(dir, "lpu3"), 1, 3)
	r := Run(1, dir, env(map[string]string{"NUM_LPU_DEVICES": "1", "LPU_VISIBLE_DEVICES": "3"}))
	text := strings.Join(r.Lines, "\n")
	if !r.Failed || !strings.Contains(text, "open "+filepath.Join(dir, "lpu3")+": refused") {
		t.Fatalf("a refused open passes:\n%s", text)
	}
	if _, err := os.Open(filepath.Join(dir, "lpu3")); !errors.Is(err, syscall.EACCES) {
		t.Fatalf("the nodev mount does not refuse: %v", err)
	}
}

// TestMainExitCodes: 0 when granted, 1 when not, 2 on bad arguments.
func TestMainExitCodes(t *testing.T) {
	dev := devDir(t, t.TempDir())
	mknod(t, filepath.Join(dev, "lpu1"), 240, 1)
	granted := env(map[string]string{"NUM_LPU_DEVICES": "1", "LPU_VISIBLE_DEVICES": "1"})
	for name, tc := range map[string]struct {
		args   []string
		code   int
		saying string
	}{
		"pass":         {[]string{"--lpus", "1", "--dev", dev}, 0, "PASS: 1 LPU(s)"},
		"fail":         {[]string{"--lpus", "2", "--dev", dev}, 1, "FAIL: the container does not hold the 2"},
		"zero LPUs":    {[]string{"--lpus", "0"}, 2, "--lpus must be at least 1"},
		"extra args":   {[]string{"--dev", dev, "now"}, 2, `"now"`},
		"unknown flag": {[]string{"--count", "1"}, 2, "flag provided but not defined"},
	} {
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			if code := Main(tc.args, granted, &out); code != tc.code || !strings.Contains(out.String(), tc.saying) {
				t.Fatalf("Main(%q) = %d, want %d saying %q:\n%s", tc.args, code, tc.code, tc.saying, out.String())
			}
		})
	}
}

package devicesim

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/hyperaccel/lpu-node/pkg/device"
)

func TestSpecFor(t *testing.T) {
	for n, want := range map[int]int{1: 1, 7: 1, 8: 1, 12: 1, 16: 2, 17: 1, 24: 3, 32: 4, 36: 4} {
		got := SpecFor(n)
		if got.Devices != n || got.Rings != want || n%got.Rings != 0 {
			t.Errorf("SpecFor(%d) = %+v, want %d devices in %d rings", n, got, n, want)
		}
	}
}

func TestCheckCount(t *testing.T) {
	tests := map[string]struct {
		n       int
		wantErr string
	}{
		"none":      {n: 0, wantErr: "simulate 0 LPUs: want 1 to 1024"},
		"one":       {n: 1},
		"max":       {n: MaxDevices},
		"negative":  {n: -1, wantErr: "simulate -1 LPUs: want 1 to 1024"},
		"above max": {n: MaxDevices + 1, wantErr: "simulate 1025 LPUs: want 1 to 1024"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := CheckCount(tc.n)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || err.Error() != tc.wantErr) {
				t.Fatalf("CheckCount(%d) = %v, want %q", tc.n, err, tc.wantErr)
			}
		})
	}
}

func TestWriteNode(t *testing.T) {
	tests := map[string]struct {
		n         int
		wantErr   bool
		wantRings int
	}{
		"one ring":  {n: 8, wantRings: 1},
		"two rings": {n: 16, wantRings: 2},
		"odd count": {n: 12, wantRings: 1},
		"zero":      {n: 0, wantErr: true},
		"above max": {n: MaxDevices + 1, wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			root := filepath.Join(t.TempDir(), "simulated-node")
			err := WriteNode(root, tc.n, "")
			if tc.wantErr {
				if err == nil {
					t.Fatalf("WriteNode(%d): no error", tc.n)
				}
				if _, serr := os.Stat(root); serr == nil {
					t.Errorf("WriteNode(%d) failed but left %s", tc.n, root)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !device.IsMarkedTree(root) {
				t.Fatalf("%s carries no %s", root, device.TreeMarker)
			}
			inv, err := device.NewSysfs(root).Discover(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if len(inv.Devices) != tc.n || len(inv.Rings) != tc.wantRings {
				t.Fatalf("discovered %d devices in %d rings, want %d in %d", len(inv.Devices), len(inv.Rings), tc.n, tc.wantRings)
			}
			if err := WriteNode(root, tc.n, ""); err != nil {
				t.Fatalf("second WriteNode: %v (want idempotent)", err)
			}
		})
	}
}

// TestWriteNodeRefuses: WriteNode writes only into a missing or empty
// directory or an earlier simulation, never into "/" or a directory of
// other files (a host root mounted at /host, a typo), and leaves those
// untouched.
func TestWriteNodeRefuses(t *testing.T) {
	tests := map[string]struct {
		root    func(t *testing.T) string
		refused bool
	}{
		"slash":        {root: func(*testing.T) string { return "/" }, refused: true},
		"empty":        {root: func(*testing.T) string { return "" }, refused: true},
		"missing":      {root: func(t *testing.T) string { return filepath.Join(t.TempDir(), "a", "b") }},
		"empty dir":    {root: func(t *testing.T) string { return t.TempDir() }},
		"earlier node": {root: func(t *testing.T) string { r := t.TempDir(); mustNil(t, WriteNode(r, 16, "")); return r }},
		"older release's node": {root: func(t *testing.T) string {
			r := t.TempDir()
			mustNil(t, WriteNode(r, 8, ""))
			mustNil(t, os.Remove(filepath.Join(r, device.TreeMarker)))
			return r
		}},
		"host-like tree": {root: func(t *testing.T) string {
			r := t.TempDir()
			mustNil(t, os.Mkdir(filepath.Join(r, "sys"), 0o755))
			return r
		}, refused: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			root := tc.root(t)
			err := WriteNode(root, 8, "")
			if refused := errors.Is(err, ErrNotSimulation); refused != tc.refused {
				t.Fatalf("WriteNode(%q) = %v, refused %v, want %v", root, err, refused, tc.refused)
			}
			if tc.refused {
				if root != "/" && root != "" {
					if _, err := os.Stat(filepath.Join(root, device.TreeMarker)); err == nil {
						t.Errorf("refused but wrote into %s", root)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			inv, err := device.NewSysfs(root).Discover(context.Background())
			if err != nil || len(inv.Devices) != 8 || !inv.Devices[7].Health.Healthy {
				t.Fatalf("discovered %v, %v; want 8 healthy LPUs", inv, err)
			}
		})
	}
}

func mustNil(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

package devicesim

import (
	"context"
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
		"real hardware": {n: 0},
		"one":           {n: 1},
		"max":           {n: MaxDevices},
		"negative":      {n: -1, wantErr: "simulate -1: want 0 to 1024"},
		"above max":     {n: MaxDevices + 1, wantErr: "simulate 1025: want 0 to 1024"},
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
			state := t.TempDir()
			root, err := WriteNode(state, tc.n, "")
			if tc.wantErr {
				if err == nil {
					t.Fatalf("WriteNode(%d): no error", tc.n)
				}
				if _, serr := os.Stat(Root(state)); serr == nil {
					t.Errorf("WriteNode(%d) failed but left %s", tc.n, Root(state))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if root != filepath.Join(state, "simulated-node") {
				t.Fatalf("root %q, want under %s", root, state)
			}
			inv, err := device.NewSysfs(root).Discover(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if len(inv.Devices) != tc.n || len(inv.Rings) != tc.wantRings {
				t.Fatalf("discovered %d devices in %d rings, want %d in %d", len(inv.Devices), len(inv.Rings), tc.n, tc.wantRings)
			}
			again, err := WriteNode(state, tc.n, "")
			if err != nil || again != root {
				t.Fatalf("second WriteNode = %q, %v; want %q (idempotent)", again, err, root)
			}
		})
	}
}

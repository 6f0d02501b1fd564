package nfd

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hyperaccel/lpu-node/pkg/device"
)

func inventory(n, perRing int, fw ...string) *device.Inventory {
	inv := &device.Inventory{DriverVersion: "2.1.0-sim"}
	for i := range n {
		f := "1.8.2"
		if i < len(fw) {
			f = fw[i]
		}
		inv.Devices = append(inv.Devices, device.Device{ID: device.ID(i), Index: i, Firmware: f, Model: "LPU X1 (rev B)"})
		if i%perRing == 0 {
			inv.Rings = append(inv.Rings, nil)
		}
		inv.Rings[len(inv.Rings)-1] = append(inv.Rings[len(inv.Rings)-1], device.ID(i))
	}
	return inv
}

// withoutModel clears the model of the devices at idx.
func withoutModel(inv *device.Inventory, idx ...int) *device.Inventory {
	for _, i := range idx {
		inv.Devices[i].Model = ""
	}
	return inv
}

func TestFeatures(t *testing.T) {
	tests := map[string]struct {
		inv  *device.Inventory
		want []string
	}{
		"one ring of 8": {
			inv: inventory(8, 8),
			want: []string{"hyperaccel.ai/lpu.present=true", "hyperaccel.ai/lpu.count=8", "hyperaccel.ai/lpu.rings=1",
				"hyperaccel.ai/lpu.largest-ring=8", "hyperaccel.ai/lpu.driver-version=2.1.0-sim",
				"hyperaccel.ai/lpu.model=LPU-X1--rev-B", "hyperaccel.ai/lpu.firmware=1.8.2"},
		},
		"two rings, mixed firmware": {
			inv: inventory(16, 8, "1.0", "1.1"),
			want: []string{"hyperaccel.ai/lpu.present=true", "hyperaccel.ai/lpu.count=16", "hyperaccel.ai/lpu.rings=2",
				"hyperaccel.ai/lpu.largest-ring=8", "hyperaccel.ai/lpu.driver-version=2.1.0-sim",
				"hyperaccel.ai/lpu.model=LPU-X1--rev-B", "hyperaccel.ai/lpu.firmware=mixed"},
		},
		"mixed models, no model on one": {
			inv: withoutModel(inventory(2, 2), 1),
			want: []string{"hyperaccel.ai/lpu.present=true", "hyperaccel.ai/lpu.count=2", "hyperaccel.ai/lpu.rings=1",
				"hyperaccel.ai/lpu.largest-ring=2", "hyperaccel.ai/lpu.driver-version=2.1.0-sim",
				"hyperaccel.ai/lpu.model=mixed", "hyperaccel.ai/lpu.firmware=1.8.2"},
		},
		"model unknown everywhere": {
			inv: withoutModel(inventory(1, 1), 0),
			want: []string{"hyperaccel.ai/lpu.present=true", "hyperaccel.ai/lpu.count=1", "hyperaccel.ai/lpu.rings=1",
				"hyperaccel.ai/lpu.largest-ring=1", "hyperaccel.ai/lpu.driver-version=2.1.0-sim", "hyperaccel.ai/lpu.firmware=1.8.2"},
		},
		"no devices": {inv: &device.Inventory{}, want: nil},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := Features("hyperaccel.ai/lpu", tc.inv); !slices.Equal(got, tc.want) {
				t.Fatalf("got %q\nwant %q", got, tc.want)
			}
		})
	}
}

var labelValue = regexp.MustCompile(`^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$`)

func FuzzLabelValue(f *testing.F) {
	for _, s := range []string{"2.1.0-sim", " v1 (beta) ", "", "-", strings.Repeat("x", 100), "ü1.0ü", "a\nb"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v := LabelValue(s)
		if len(v) > 63 || !labelValue.MatchString(v) {
			t.Fatalf("LabelValue(%q) = %q: not a valid label value", s, v)
		}
		if labelValue.MatchString(s) && len(s) <= 63 && v != s {
			t.Fatalf("LabelValue(%q) = %q: changed a valid value", s, v)
		}
	})
}

func TestWrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "features.d", "lpu")
	lines := []string{"hyperaccel.ai/lpu.count=8"}
	changed, err := Write(path, lines)
	if err != nil || !changed {
		t.Fatalf("first write: changed=%v err=%v", changed, err)
	}
	got, err := os.ReadFile(path)
	if err != nil || string(got) != "hyperaccel.ai/lpu.count=8\n" {
		t.Fatalf("content %q %v", got, err)
	}
	fi1, _ := os.Stat(path)
	time.Sleep(10 * time.Millisecond)
	if changed, err := Write(path, lines); err != nil || changed {
		t.Fatalf("same content: changed=%v err=%v", changed, err)
	}
	fi2, _ := os.Stat(path)
	if !fi1.ModTime().Equal(fi2.ModTime()) {
		t.Fatal("identical content rewritten")
	}
	if changed, err := Write(path, []string{"hyperaccel.ai/lpu.count=7"}); err != nil || !changed {
		t.Fatalf("new content: changed=%v err=%v", changed, err)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Fatalf("leftover temporary files: %v", entries)
	}
	if changed, err := Write(path, nil); err != nil || !changed {
		t.Fatalf("remove: changed=%v err=%v", changed, err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("file still there: %v", err)
	}
}

func TestExpiring(t *testing.T) {
	until := time.Date(2030, 7, 29, 13, 22, 33, 900_000_000, time.FixedZone("KST", 9*3600))
	cases := map[string]struct {
		lines, want []string
	}{
		"lines get the directive first, in UTC, whole seconds": {
			lines: []string{"hyperaccel.ai/lpu.present=true"},
			want:  []string{"# +expiry-time=2030-07-29T04:22:33Z", "hyperaccel.ai/lpu.present=true"},
		},
		"no lines stay none (the file is removed)": {},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := Expiring(tc.lines, until)
			if !slices.Equal(got, tc.want) {
				t.Errorf("Expiring = %q, want %q", got, tc.want)
			}
		})
	}
	if Refresh >= Lifetime/2 {
		t.Errorf("Refresh %v must leave room inside Lifetime %v", Refresh, Lifetime)
	}
}

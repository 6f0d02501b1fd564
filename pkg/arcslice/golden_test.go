package arcslice

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"flag"
	"io"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/hyperaccel/lpu-node/pkg/device"
)

var update = flag.Bool("update", false, "rewrite testdata/*.json.gz from the current builder")

// TestBuildGolden pins the published slices byte for byte: the JSON of the
// ResourceSlice objects for each inventory must equal the golden file,
// which was written by the builder before its allocation work. A change in
// what a node publishes must be deliberate (go test -run Golden -update).
func TestBuildGolden(t *testing.T) {
	mixed := inventory(1, 16)
	mixed.Devices[5].Firmware = "2.0.2"
	mixed.Devices[9].NUMANode = -1
	mixed.Devices[12].PCIBusID = ""
	mixed.Devices[14].Model = "LPU-X2"
	tests := map[string]struct {
		inv     *device.Inventory
		opts    Options
		held    []string
		sick    map[string]bool
		rebuild bool // also render via Builder.Slices after a first Slices call
	}{
		"1x8":              {inv: inventory(1, 8), opts: Options{PCIeRoot: rootOf}},
		"2x8":              {inv: inventory(2, 8), opts: Options{PCIeRoot: rootOf}, held: []string{"lpu0", "lpu1", "lpu12"}, sick: map[string]bool{"lpu9": true}, rebuild: true},
		"32x8":             {inv: inventory(32, 8), opts: Options{PCIeRoot: rootOf}, held: []string{"lpu0", "lpu1", "lpu9", "lpu100", "lpu200", "lpu201"}, sick: map[string]bool{"lpu17": true, "lpu250": true}, rebuild: true},
		"1x16-mixed":       {inv: mixed, held: []string{"lpu3"}},
		"1x16-mixed-roots": {inv: mixed, opts: Options{PCIeRoot: rootOf}, sick: map[string]bool{"lpu4": true}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var got bytes.Buffer
			b, err := NewBuilder(tc.inv, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if tc.rebuild {
				b.Slices(nil, nil)
			}
			write(t, &got, b.Slices(tc.held, tc.sick))
			built, err := build(tc.inv, tc.opts, tc.held)
			if err != nil {
				t.Fatal(err)
			}
			write(t, &got, built)
			path := filepath.Join("testdata", name+".json.gz")
			if *update {
				writeGolden(t, path, got.Bytes())
			}
			want := readGolden(t, path)
			if !bytes.Equal(got.Bytes(), want) {
				t.Fatalf("slices differ from %s (%d bytes, want %d): %s", path, got.Len(), len(want), firstDiff(got.Bytes(), want))
			}
		})
	}
}

// write encodes the slices as they are, every field of resourceslice.Slice.
func write(t *testing.T, w io.Writer, built []resourceslice.Slice) {
	t.Helper()
	enc := json.NewEncoder(w)
	enc.SetIndent("", " ")
	if err := enc.Encode(built); err != nil {
		t.Fatal(err)
	}
}

func writeGolden(t *testing.T, path string, data []byte) {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readGolden(t *testing.T, path string) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	data, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return data
}

// firstDiff shows the lines around the first differing byte.
func firstDiff(got, want []byte) string {
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	lo := max(0, bytes.LastIndexByte(got[:min(i, len(got))], '\n')-200)
	return "got …" + string(got[lo:min(len(got), i+100)]) + "… want …" + string(want[lo:min(len(want), i+100)]) + "…"
}

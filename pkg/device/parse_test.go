package device_test

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/hyperaccel/lpu-node/pkg/device"
)

func TestParseDev(t *testing.T) {
	tests := map[string]struct {
		in           string
		major, minor int64
		wantErr      string
	}{
		"typical":         {in: "509:3", major: 509, minor: 3},
		"zeros":           {in: "0:0"},
		"largest":         {in: "4095:1048575", major: 4095, minor: 1048575},
		"major too large": {in: "4096:0", wantErr: `dev "4096:0": major: "4096" exceeds 4095`},
		"minor too large": {in: "1:1048576", wantErr: `dev "1:1048576": minor: "1048576" exceeds 1048575`},
		"no colon":        {in: "509", wantErr: `dev "509": want MAJOR:MINOR`},
		"empty":           {in: "", wantErr: `dev "": want MAJOR:MINOR`},
		"empty major":     {in: ":3", wantErr: `dev ":3": major: empty`},
		"empty minor":     {in: "3:", wantErr: `dev "3:": minor: empty`},
		"two colons":      {in: "1:2:3", wantErr: `dev "1:2:3": minor: "2:3" is not a decimal number`},
		"sign":            {in: "+1:2", wantErr: `major: "+1" is not a decimal number`},
		"negative":        {in: "1:-2", wantErr: `minor: "-2" is not a decimal number`},
		"leading zero":    {in: "01:2", wantErr: `major: "01" has a leading zero`},
		"inner space":     {in: "1: 2", wantErr: `minor: " 2" is not a decimal number`},
		"hex":             {in: "0x1:2", wantErr: `major: "0x1" has a leading zero`},
		"letters":         {in: "5a:2", wantErr: `major: "5a" is not a decimal number`},
		"huge":            {in: "99999999999999999999999:1", wantErr: `exceeds 4095`},
		"long garbage clipped": {
			in:      strings.Repeat("9", 200),
			wantErr: `dev "` + strings.Repeat("9", 64) + `...": want MAJOR:MINOR`,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			major, minor, err := device.ParseDev(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || major != tc.major || minor != tc.minor {
				t.Fatalf("ParseDev(%q) = %d, %d, %v; want %d, %d", tc.in, major, minor, err, tc.major, tc.minor)
			}
		})
	}
}

// FuzzParseDev: on success the value is exactly the canonical rendering of
// the result and within dev_t limits; on failure the error quotes the input.
func FuzzParseDev(f *testing.F) {
	for _, s := range []string{"509:3", "0:0", "4095:1048575", "4096:1", "01:1", "1:", ":", "1:2:3", "-1:1", " 1:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		major, minor, err := device.ParseDev(s)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "dev \"") {
				t.Fatalf("error %q does not name the value", err)
			}
			if major != 0 || minor != 0 {
				t.Fatalf("error with non-zero result %d:%d", major, minor)
			}
			return
		}
		if major < 0 || major > device.MaxMajor || minor < 0 || minor > device.MaxMinor {
			t.Fatalf("ParseDev(%q) = %d:%d out of range", s, major, minor)
		}
		if got := fmt.Sprintf("%d:%d", major, minor); got != s {
			t.Fatalf("ParseDev(%q) = %s, not canonical", s, got)
		}
	})
}

func TestParseNetworkTable(t *testing.T) {
	tests := map[string]struct {
		in      string
		want    [][]string
		wantErr string
	}{
		"ring of eight": {in: table8, want: [][]string{ring8}},
		"reversed links, crlf, comments": {
			in:   "# c\r\nlpu2 lpu1\r\n\r\nlpu1 lpu0 # x\r\n   lpu0\tlpu2\r\n",
			want: [][]string{{"lpu0", "lpu1", "lpu2"}},
		},
		"goes toward the lower neighbour": {
			in:   "lpu3 lpu5\nlpu5 lpu4\nlpu4 lpu3\n",
			want: [][]string{{"lpu3", "lpu4", "lpu5"}},
		},
		"rings sorted by first lpu": {
			in:   "lpu9\nlpu7 lpu8\nlpu6 lpu4\nlpu4 lpu5\nlpu5 lpu6\n",
			want: [][]string{{"lpu4", "lpu5", "lpu6"}, {"lpu7", "lpu8"}, {"lpu9"}},
		},
		"no final newline": {in: "lpu0 lpu1", want: [][]string{{"lpu0", "lpu1"}}},
		"empty":            {in: "# nothing\n\n", wantErr: "network table T: no links"},
		"self link":        {in: "lpu0 lpu1\nlpu1 lpu1\n", wantErr: "network table T line 2: lpu1 linked to itself"},
		"duplicate link": {
			in:      "lpu0 lpu1\nlpu1 lpu2\nlpu1 lpu0\n",
			wantErr: "network table T line 3: duplicate link lpu1 lpu0 (first on line 1)",
		},
		"third link": {
			in:      "lpu0 lpu1\nlpu0 lpu2\nlpu0 lpu3\n",
			wantErr: "network table T line 3: lpu0 has a third link (already linked to lpu1 on line 1 and lpu2 on line 2)",
		},
		"alone twice":    {in: "lpu0\nlpu0\n", wantErr: "line 2: lpu0 listed alone twice (first on line 1)"},
		"alone, linked":  {in: "lpu0 lpu1\nlpu0\n", wantErr: "line 2: lpu0 listed alone but linked on line 1"},
		"linked, alone":  {in: "lpu0\n\nlpu0 lpu1\n", wantErr: "line 3: lpu0 linked but listed alone on line 1"},
		"three fields":   {in: "lpu0 lpu1 lpu2\n", wantErr: `line 1: want one link "lpuA lpuB" or one LPU alone, got 3 fields`},
		"arrow notation": {in: "lpu0 -> lpu1\n", wantErr: "line 1: want one link"},
		"bad id":         {in: "lpu0 lpu1\nlpu1 gpu2\n", wantErr: `line 2: "gpu2" is not an LPU ID (want lpuN)`},
		"leading zero":   {in: "lpu00 lpu1\n", wantErr: `line 1: "lpu00" is not an LPU ID`},
		"chain": {
			in:      "lpu3 lpu4\nlpu4 lpu5\nlpu5 lpu6\nlpu0 lpu1\nlpu1 lpu2\nlpu2 lpu0\n",
			wantErr: "line 1: lpu3 has only one link (to lpu4): links must close a ring",
		},
		"too large": {in: strings.Repeat("#", device.MaxTableBytes+1), wantErr: "network table T: larger than 1048576 bytes"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := device.ParseNetworkTable("T", []byte(tc.in))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got.Rings, tc.want) {
				t.Errorf("rings %v, want %v", got.Rings, tc.want)
			}
		})
	}
}

func TestNetworkTableLine(t *testing.T) {
	nt, err := device.ParseNetworkTable("T", []byte("# c\n\nlpu1 lpu0\nlpu2 lpu1\nlpu0 lpu2\n"))
	if err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]int{"lpu1": 3, "lpu0": 3, "lpu2": 4, "lpu3": 0} {
		if got := nt.Line(id); got != want {
			t.Errorf("Line(%s) = %d, want %d", id, got, want)
		}
	}
}

// FuzzParseNetworkTable: on success every LPU named in the input is on
// exactly one ring, consecutive ring members (and last and first) are linked
// in the input, no link is left unused, and rings are canonical. Errors name
// the table.
func FuzzParseNetworkTable(f *testing.F) {
	for _, s := range []string{table8, tableTwoRings, "lpu0\n", "lpu0 lpu1\n", "lpu0 lpu1\nlpu1 lpu0\n",
		"lpu0 lpu1\nlpu1 lpu2\n", "lpu0 lpu1 # c\nlpu2 lpu1\nlpu0 lpu2", "lpu0 lpu0", "x y z"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		nt, err := device.ParseNetworkTable("T", []byte(in))
		if err != nil {
			if !strings.HasPrefix(err.Error(), "network table T") {
				t.Fatalf("error %q does not name the table", err)
			}
			return
		}
		// Re-read the input naively: the links and the IDs mentioned.
		links := map[[2]string]bool{}
		mentioned := map[string]bool{}
		for line := range strings.SplitSeq(in, "\n") {
			line, _, _ = strings.Cut(line, "#")
			fields := strings.Fields(line)
			for _, id := range fields {
				mentioned[id] = true
			}
			if len(fields) == 2 {
				links[[2]string{fields[0], fields[1]}] = true
				links[[2]string{fields[1], fields[0]}] = true
			}
		}
		on := map[string]int{}
		used := 0
		for i, ring := range nt.Rings {
			if len(ring) == 0 {
				t.Fatalf("ring %d empty", i)
			}
			for p, id := range ring {
				on[id]++
				next := ring[(p+1)%len(ring)]
				if len(ring) > 1 && !links[[2]string{id, next}] {
					t.Fatalf("ring %v: %s and %s not linked in input", ring, id, next)
				}
			}
			switch {
			case len(ring) == 2:
				used += 2
			case len(ring) > 2:
				used += 2 * len(ring)
			}
			idx := func(id string) int { n, _ := device.ParseID(id); return n }
			first := idx(ring[0])
			for _, id := range ring[1:] {
				if idx(id) <= first {
					t.Fatalf("ring %v does not start at its lowest LPU", ring)
				}
			}
			if len(ring) > 2 && idx(ring[1]) > idx(ring[len(ring)-1]) {
				t.Fatalf("ring %v does not go toward the lower neighbour", ring)
			}
			if i > 0 && idx(nt.Rings[i-1][0]) >= first {
				t.Fatalf("rings %v not sorted by first LPU", nt.Rings)
			}
		}
		if used != len(links) {
			t.Fatalf("rings %v use %d directed links, input has %d", nt.Rings, used, len(links))
		}
		for id := range mentioned {
			if on[id] != 1 {
				t.Fatalf("%s on %d rings", id, on[id])
			}
			if nt.Line(id) < 1 {
				t.Fatalf("no line for %s", id)
			}
		}
		if len(on) != len(mentioned) {
			t.Fatalf("rings name %d LPUs, input %d", len(on), len(mentioned))
		}
	})
}

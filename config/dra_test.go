package config

import (
	"slices"
	"strings"
	"testing"
)

func TestDRAArcSizes(t *testing.T) {
	if d := Default().DRA; len(d.ArcSizes) != 0 {
		t.Errorf("default arc sizes %v, want none (every arc)", d.ArcSizes)
	}
	tests := map[string]struct {
		yaml    string
		want    []int
		wantErr []string
	}{
		"sizes":       {yaml: "dra:\n  arcSizes: [1, 2, 4, 8]\n", want: []int{1, 2, 4, 8}},
		"every arc":   {yaml: "dra:\n  arcSizes: []\n", want: []int{}},
		"zero":        {yaml: "dra:\n  arcSizes: [0, 4]\n", wantErr: []string{`dra.arcSizes[0]: "0" must be 1..32 LPUs`}},
		"too long":    {yaml: "dra:\n  arcSizes: [33]\n", wantErr: []string{`dra.arcSizes[0]: "33" must be 1..32 LPUs`}},
		"repeated":    {yaml: "dra:\n  arcSizes: [4, 2, 4]\n", wantErr: []string{`dra.arcSizes[2]: "4" duplicates dra.arcSizes[0]`}},
		"not a list":  {yaml: "dra:\n  arcSizes: 4\n", wantErr: []string{"dra.arcSizes", "list"}},
		"not numbers": {yaml: "dra:\n  arcSizes: [four]\n", wantErr: []string{"dra.arcSizes[0]"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c, err := Parse([]byte("version: v1\n" + tc.yaml))
			if tc.wantErr != nil {
				if err == nil {
					t.Fatalf("Parse accepted %q: %v", tc.yaml, c.DRA)
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q lacks %q", err, w)
					}
				}
				return
			}
			if err != nil || !slices.Equal(c.DRA.ArcSizes, tc.want) {
				t.Fatalf("Parse = %v, %v; want %v", c.DRA.ArcSizes, err, tc.want)
			}
		})
	}
}

func TestDRANodeLabels(t *testing.T) {
	if !Default().DRA.LabelsNode() {
		t.Error("default: lpu-dra does not label its node")
	}
	for yaml, want := range map[string]bool{"dra:\n  nodeLabels: false\n": false, "dra:\n  nodeLabels: true\n": true, "dra: {}\n": true} {
		c, err := Parse([]byte("version: v1\n" + yaml))
		if err != nil || c.DRA.LabelsNode() != want {
			t.Errorf("%q: LabelsNode = %v, %v; want %v", yaml, c.DRA.LabelsNode(), err, want)
		}
	}
	if _, err := Parse([]byte("version: v1\ndra:\n  nodeLabels: maybe\n")); err == nil || !strings.Contains(err.Error(), "nodeLabels") {
		t.Errorf("nodeLabels: maybe: %v, want an error naming it", err)
	}
}

// TestDRADeviceClasses: lpu-dra prepares claims of the configured classes,
// by default the chart's names for the count class and every arc size; an
// empty name is refused.
func TestDRADeviceClasses(t *testing.T) {
	def := Default().DRA.Classes()
	for _, want := range []string{"lpu.hyperaccel.ai", "lpu-count.hyperaccel.ai", "lpu-arc-1.hyperaccel.ai", "lpu-arc-32.hyperaccel.ai"} {
		if !slices.Contains(def, want) {
			t.Errorf("default classes %v lack %s", def, want)
		}
	}
	if slices.Contains(def, "lpu-arc-33.hyperaccel.ai") || len(def) != 2+MaxArcSize {
		t.Errorf("default classes %v, want lpu.hyperaccel.ai, lpu-count.hyperaccel.ai and lpu-arc-1..%d", def, MaxArcSize)
	}
	c, err := Parse([]byte("version: v1\ndra:\n  deviceClasses: [lpu-arc-4.hyperaccel.ai]\n"))
	if err != nil || !slices.Equal(c.DRA.Classes(), []string{"lpu-arc-4.hyperaccel.ai"}) {
		t.Fatalf("Parse = %v, %v", c.DRA.Classes(), err)
	}
	if _, err := Parse([]byte("version: v1\ndra:\n  deviceClasses: [\"\"]\n")); err == nil || !strings.Contains(err.Error(), "dra.deviceClasses[0]") {
		t.Fatalf("an empty class name: %v", err)
	}
}

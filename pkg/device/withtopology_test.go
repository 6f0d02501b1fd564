package device

import (
	"fmt"
	"testing"
)

func TestWithTopology(t *testing.T) {
	tests := map[string]struct {
		source    string
		rings     [][]string
		table     string
		wantRings string // fmt of the rings the Sysfs keeps
		wantTable string
	}{
		// An earlier WithRings / WithNetworkTable stands when the
		// topology does not name its own.
		"defaults":       {source: TopologyAuto, wantRings: "[[keep]]", wantTable: "/keep"},
		"explicit rings": {source: TopologyConfig, rings: [][]string{{"lpu0", "lpu1"}, {"lpu2", "lpu3"}}, wantRings: "[[lpu0 lpu1] [lpu2 lpu3]]", wantTable: "/keep"},
		"empty rings":    {source: TopologyAuto, rings: [][]string{}, wantRings: "[[keep]]", wantTable: "/keep"},
		"table":          {source: TopologyTable, table: "/etc/lpu/links.csv", wantRings: "[[keep]]", wantTable: "/etc/lpu/links.csv"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := NewSysfs("/", WithRings([][]string{{"keep"}}), WithNetworkTable("/keep"), WithTopology(tc.source, tc.rings, tc.table))
			if s.source != tc.source || s.table != tc.wantTable {
				t.Errorf("source %q table %q, want %q %q", s.source, s.table, tc.source, tc.wantTable)
			}
			if got := fmt.Sprint(s.rings); got != tc.wantRings {
				t.Errorf("rings %s, want %s", got, tc.wantRings)
			}
			if len(tc.rings) > 0 {
				tc.rings[0][0] = "changed"
				if s.rings[0][0] == "changed" {
					t.Error("rings share the caller's backing array")
				}
			}
		})
	}
}

package device_test

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/device/devicetest"
)

// rowsWithRings gives n devices; ring maps an index to its ring attributes
// (nil: none).
func rowsWithRings(n int, ring func(i int) *devicetest.Ring) []devicetest.Row {
	rows := make([]devicetest.Row, n)
	for i := range rows {
		rows[i] = devicetest.Row{Index: i}
		if ring != nil {
			rows[i].Ring = ring(i)
		}
	}
	return rows
}

func twoRingsOf(per int) func(int) *devicetest.Ring {
	return func(i int) *devicetest.Ring { return &devicetest.Ring{ID: i / per, Position: i % per} }
}

const tablePath = "/etc/lpu/network.table"

const table8 = `# one ring of eight
lpu0 lpu1
lpu1 lpu2
lpu2 lpu3
lpu3 lpu4
lpu4 lpu5
lpu5 lpu6
lpu6 lpu7
lpu7 lpu0
`

// A shuffled, reversed table of two rings of four with odd wiring.
const tableTwoRings = `
lpu6 lpu3   # ring B: 3-6-1-4
lpu1 lpu6
lpu4 lpu1
lpu3 lpu4
# ring A: 0-2-7-5
lpu2 lpu0
lpu7 lpu2
lpu5 lpu7
lpu0 lpu5
`

var ring8 = []string{"lpu0", "lpu1", "lpu2", "lpu3", "lpu4", "lpu5", "lpu6", "lpu7"}

func TestTopology(t *testing.T) {
	tests := map[string]struct {
		rows    []devicetest.Row
		table   string // written at tablePath when not ""
		opts    []device.Option
		setup   func(t *testing.T, root string)
		want    [][]string
		wantErr []string // substrings of the error
	}{
		"auto: index order without inputs": {
			rows: rowsWithRings(8, nil),
			want: [][]string{ring8},
		},
		"auto: sysfs attributes, two rings": {
			rows: rowsWithRings(8, twoRingsOf(4)),
			want: [][]string{{"lpu0", "lpu1", "lpu2", "lpu3"}, {"lpu4", "lpu5", "lpu6", "lpu7"}},
		},
		"auto: sysfs positions not in index order, ring ids sparse": {
			rows: rowsWithRings(4, func(i int) *devicetest.Ring {
				return []*devicetest.Ring{{ID: 9, Position: 1}, {ID: 3, Position: 1}, {ID: 9, Position: 0}, {ID: 3, Position: 0}}[i]
			}),
			want: [][]string{{"lpu3", "lpu1"}, {"lpu2", "lpu0"}},
		},
		"auto: table wins over sysfs": {
			rows:  rowsWithRings(8, twoRingsOf(4)),
			table: tableTwoRings,
			opts:  []device.Option{device.WithNetworkTable(tablePath)},
			want:  [][]string{{"lpu0", "lpu2", "lpu7", "lpu5"}, {"lpu1", "lpu4", "lpu3", "lpu6"}},
		},
		"auto: config wins over table": {
			rows:  rowsWithRings(8, twoRingsOf(4)),
			table: tableTwoRings,
			opts: []device.Option{device.WithNetworkTable(tablePath),
				device.WithRings([][]string{{"lpu7", "lpu6", "lpu5", "lpu4"}, {"lpu3", "lpu2", "lpu1", "lpu0"}})},
			want: [][]string{{"lpu7", "lpu6", "lpu5", "lpu4"}, {"lpu3", "lpu2", "lpu1", "lpu0"}},
		},
		"auto: configured table absent falls through to sysfs": {
			rows: rowsWithRings(8, twoRingsOf(4)),
			opts: []device.Option{device.WithNetworkTable(tablePath)},
			want: [][]string{{"lpu0", "lpu1", "lpu2", "lpu3"}, {"lpu4", "lpu5", "lpu6", "lpu7"}},
		},
		"auto: invalid table does not fall through": {
			rows:    rowsWithRings(8, twoRingsOf(4)),
			table:   "lpu0 lpu1\n",
			opts:    []device.Option{device.WithNetworkTable(tablePath)},
			wantErr: []string{"network table /etc/lpu/network.table", "lpu2, lpu3, lpu4, lpu5, lpu6, lpu7 discovered but not in the table"},
		},
		"forced index ignores the other inputs": {
			rows:  rowsWithRings(8, twoRingsOf(4)),
			table: tableTwoRings,
			opts:  []device.Option{device.WithNetworkTable(tablePath), device.WithTopologySource(device.TopologyIndex)},
			want:  [][]string{ring8},
		},
		"forced sysfs ignores the table": {
			rows:  rowsWithRings(8, twoRingsOf(4)),
			table: tableTwoRings,
			opts:  []device.Option{device.WithNetworkTable(tablePath), device.WithTopologySource(device.TopologySysfs)},
			want:  [][]string{{"lpu0", "lpu1", "lpu2", "lpu3"}, {"lpu4", "lpu5", "lpu6", "lpu7"}},
		},
		"forced table": {
			rows:  rowsWithRings(8, nil),
			table: table8,
			opts:  []device.Option{device.WithNetworkTable(tablePath), device.WithTopologySource(device.TopologyTable)},
			want:  [][]string{ring8},
		},
		"forced table, file absent": {
			rows:    rowsWithRings(8, nil),
			opts:    []device.Option{device.WithNetworkTable(tablePath), device.WithTopologySource(device.TopologyTable)},
			wantErr: []string{"network table /etc/lpu/network.table", "file does not exist"},
		},
		"forced table, none configured": {
			rows:    rowsWithRings(8, nil),
			opts:    []device.Option{device.WithTopologySource(device.TopologyTable)},
			wantErr: []string{"topology source table: no network table configured"},
		},
		"forced config, none configured": {
			rows:    rowsWithRings(8, nil),
			opts:    []device.Option{device.WithTopologySource(device.TopologyConfig)},
			wantErr: []string{"topology source config: no rings configured"},
		},
		"forced sysfs, no attributes": {
			rows:    rowsWithRings(8, nil),
			opts:    []device.Option{device.WithTopologySource(device.TopologySysfs)},
			wantErr: []string{"topology source sysfs: no device has ring_id and ring_position"},
		},
		"unknown source": {
			rows:    rowsWithRings(1, nil),
			opts:    []device.Option{device.WithTopologySource("mesh")},
			wantErr: []string{`topology source "mesh": want auto, config, table, sysfs or index`},
		},
		"config: unknown id": {
			rows:    rowsWithRings(4, nil),
			opts:    []device.Option{device.WithRings([][]string{{"lpu0", "lpu1"}, {"lpu2", "lpu9"}})},
			wantErr: []string{"topology rings: ring 1 position 1: lpu9 not discovered on this node"},
		},
		"config: duplicate id": {
			rows:    rowsWithRings(4, nil),
			opts:    []device.Option{device.WithRings([][]string{{"lpu0", "lpu1"}, {"lpu2", "lpu3", "lpu1"}})},
			wantErr: []string{"topology rings: ring 1 position 2: lpu1 already on ring 0 position 1"},
		},
		"config: device on no ring": {
			rows:    rowsWithRings(5, nil),
			opts:    []device.Option{device.WithRings([][]string{{"lpu0", "lpu1", "lpu3"}})},
			wantErr: []string{"topology rings: lpu2, lpu4 discovered but on no ring"},
		},
		"config: empty ring": {
			rows:    rowsWithRings(2, nil),
			opts:    []device.Option{device.WithRings([][]string{{"lpu0", "lpu1"}, {}})},
			wantErr: []string{"topology rings: ring 1 is empty"},
		},
		"config: malformed id": {
			rows:    rowsWithRings(2, nil),
			opts:    []device.Option{device.WithRings([][]string{{"lpu0", "/dev/lpu1"}})},
			wantErr: []string{"topology rings: ring 0 position 1", `device id "/dev/lpu1"`},
		},
		"config: several rings, given order kept": {
			rows: rowsWithRings(6, nil),
			opts: []device.Option{device.WithRings([][]string{{"lpu5"}, {"lpu4", "lpu0"}, {"lpu1", "lpu3", "lpu2"}})},
			want: [][]string{{"lpu5"}, {"lpu4", "lpu0"}, {"lpu1", "lpu3", "lpu2"}},
		},
		"sysfs: some devices without attributes": {
			rows: rowsWithRings(4, func(i int) *devicetest.Ring {
				if i == 2 {
					return nil
				}
				return &devicetest.Ring{ID: 0, Position: i}
			}),
			wantErr: []string{"ring attributes: lpu0, lpu1, lpu3 have ring_id and ring_position but lpu2 do not"},
		},
		"sysfs: broken device without attributes gets a ring of its own": {
			rows: []devicetest.Row{
				{Index: 0, Ring: &devicetest.Ring{ID: 0, Position: 0}},
				{Index: 1, Status: "DEAD"},
				{Index: 2, Ring: &devicetest.Ring{ID: 0, Position: 1}},
			},
			want: [][]string{{"lpu0", "lpu2"}, {"lpu1"}},
		},
		"sysfs: unreadable class entry of a broken device": {
			rows: []devicetest.Row{
				{Index: 0, Ring: &devicetest.Ring{ID: 0, Position: 0}},
				{Index: 2, Ring: &devicetest.Ring{ID: 0, Position: 1}},
			},
			setup: func(t *testing.T, root string) {
				devicetest.WriteFile(t, root, "/sys/class/lpu/lpu1", "not a directory")
			},
			want: [][]string{{"lpu0", "lpu2"}, {"lpu1"}},
		},
		"sysfs: duplicate position": {
			rows: rowsWithRings(4, func(i int) *devicetest.Ring {
				return &devicetest.Ring{ID: 0, Position: min(i, 2)}
			}),
			wantErr: []string{"ring attributes: lpu2 and lpu3 both have ring_id 0 ring_position 2"},
		},
		"sysfs: gap in positions": {
			rows: rowsWithRings(4, func(i int) *devicetest.Ring {
				return &devicetest.Ring{ID: i / 2, Position: i%2 + i/3*2}
			}),
			wantErr: []string{"ring attributes: lpu3 has ring_id 1 ring_position 3, but ring 1 has 2 devices (positions 0..1)"},
		},
		"sysfs: ring_id without ring_position": {
			rows: []devicetest.Row{
				{Index: 0, Ring: &devicetest.Ring{}},
				{Index: 1, Ring: &devicetest.Ring{Position: 1}, Omit: []string{"ring_position"}},
			},
			wantErr: []string{"ring attributes: lpu1 has /sys/class/lpu/lpu1/ring_id but no /sys/class/lpu/lpu1/ring_position"},
		},
		"sysfs: garbage value": {
			rows: []devicetest.Row{
				{Index: 0, Ring: &devicetest.Ring{}},
				{Index: 1, Ring: &devicetest.Ring{Position: 1}, Files: map[string]string{"ring_position": "one\n"}},
			},
			wantErr: []string{`ring attributes: /sys/class/lpu/lpu1/ring_position: "one" is not a decimal number`},
		},
		"sysfs: negative value": {
			rows: []devicetest.Row{
				{Index: 0, Ring: &devicetest.Ring{}, Files: map[string]string{"ring_id": "-1"}},
			},
			wantErr: []string{`/sys/class/lpu/lpu0/ring_id: "-1" is not a decimal number`},
		},
		"table: unknown lpu names its line": {
			rows:    rowsWithRings(4, nil),
			table:   "lpu0 lpu1\nlpu1 lpu2\n# gap\n\nlpu2 lpu9\nlpu9 lpu0\nlpu3\n",
			opts:    []device.Option{device.WithNetworkTable(tablePath)},
			wantErr: []string{"network table /etc/lpu/network.table line 5: lpu9 not discovered on this node"},
		},
		"table: dangling chain names its line": {
			rows:    rowsWithRings(4, nil),
			table:   "lpu0 lpu1\nlpu1 lpu2\nlpu2 lpu3\n",
			opts:    []device.Option{device.WithNetworkTable(tablePath)},
			wantErr: []string{"network table /etc/lpu/network.table line 1: lpu0 has only one link (to lpu1): links must close a ring"},
		},
		"table: rings of one and two": {
			rows:  rowsWithRings(5, nil),
			table: "lpu4\nlpu3 lpu1\nlpu0 lpu2\n",
			opts:  []device.Option{device.WithNetworkTable(tablePath)},
			want:  [][]string{{"lpu0", "lpu2"}, {"lpu1", "lpu3"}, {"lpu4"}},
		},
		"table: not a file": {
			rows:    rowsWithRings(1, nil),
			table:   "",
			opts:    []device.Option{device.WithNetworkTable("/etc")},
			wantErr: []string{"network table /etc: read /etc: not a regular file: is a directory"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			root := devicetest.NewTree(t, tc.rows...)
			if tc.table != "" {
				devicetest.WriteFile(t, root, tablePath, tc.table)
			}
			devicetest.WriteFile(t, root, "/etc/placeholder", "") // /etc exists
			if tc.setup != nil {
				tc.setup(t, root)
			}
			opts := append([]device.Option{device.WithLogger(quiet)}, tc.opts...)
			inv, err := device.NewSysfs(root, opts...).Discover(context.Background())
			if len(tc.wantErr) > 0 {
				if err == nil {
					t.Fatalf("no error, rings %v", inv.Rings)
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q\n does not contain %q", err, w)
					}
				}
				if strings.Contains(err.Error(), root) {
					t.Errorf("error %q names the temp root", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Discover: %v", err)
			}
			if !reflect.DeepEqual(inv.Rings, tc.want) {
				t.Errorf("rings %v, want %v", inv.Rings, tc.want)
			}
			checkPartition(t, inv)
		})
	}
}

// checkPartition asserts every device is on exactly one ring and rings name
// only discovered devices.
func checkPartition(t *testing.T, inv *device.Inventory) {
	t.Helper()
	count := map[string]int{}
	for _, r := range inv.Rings {
		for _, id := range r {
			count[id]++
		}
	}
	for _, d := range inv.Devices {
		if count[d.ID] != 1 {
			t.Errorf("%s on %d rings", d.ID, count[d.ID])
		}
		delete(count, d.ID)
	}
	if len(count) > 0 {
		t.Errorf("rings name undiscovered devices %v", count)
	}
}

package inject

import (
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/hyperaccel/lpu-node/pkg/device"
)

func dev(i int) device.Device {
	return device.Device{ID: device.ID(i), Index: i, Path: "/dev/" + device.ID(i), Major: 240, Minor: int64(i), Health: device.Health{Healthy: true}}
}

func TestForDevices(t *testing.T) {
	tests := map[string]struct {
		devs      []device.Device
		version   string
		opts      Options
		wantNodes []string
		wantMount []Mount
		wantEnv   []string
	}{
		"wrap-around arc": {
			devs: []device.Device{dev(7), dev(0), dev(1)}, version: "2.1.0",
			wantNodes: []string{"/dev/lpu7", "/dev/lpu0", "/dev/lpu1"},
			wantEnv:   []string{"LPU_VISIBLE_DEVICES=7,0,1", "NUM_LPU_DEVICES=3", "LPU_DRIVER_VERSION=2.1.0"},
		},
		"no driver version": {
			devs:      []device.Device{dev(3)},
			wantNodes: []string{"/dev/lpu3"},
			wantEnv:   []string{"LPU_VISIBLE_DEVICES=3", "NUM_LPU_DEVICES=1"},
		},
		"mounts default container path": {
			devs:      []device.Device{dev(0)},
			opts:      Options{Mounts: []Mount{{HostPath: "/usr/lib/lpu/"}, {HostPath: "/opt/lpu/bin", ContainerPath: "/usr/local/bin/lpu"}, {}}},
			wantNodes: []string{"/dev/lpu0"},
			wantMount: []Mount{{"/usr/lib/lpu", "/usr/lib/lpu"}, {"/opt/lpu/bin", "/usr/local/bin/lpu"}},
			wantEnv:   []string{"LPU_VISIBLE_DEVICES=0", "NUM_LPU_DEVICES=1"},
		},
		"extra env sorted, reserved skipped": {
			devs: []device.Device{dev(2), dev(3)}, version: "1",
			opts: Options{Env: map[string]string{
				"Z_LAST": "z", "A_FIRST": "a=b", "LPU_VISIBLE_DEVICES": "all", "NUM_LPU_DEVICES": "8", "LPU_DRIVER_VERSION": "fake",
				"1BAD": "x", "": "y", "HAS SPACE": "z",
			}},
			wantNodes: []string{"/dev/lpu2", "/dev/lpu3"},
			wantEnv:   []string{"LPU_VISIBLE_DEVICES=2,3", "NUM_LPU_DEVICES=2", "LPU_DRIVER_VERSION=1", "A_FIRST=a=b", "Z_LAST=z"},
		},
		"two nodes per LPU, primary first, LPU by LPU": {
			devs:      []device.Device{orionDev(5), orionDev(2)},
			wantNodes: []string{"/dev/dri/renderD133", "/dev/xclmgmt5", "/dev/dri/renderD130", "/dev/xclmgmt2"},
			wantEnv:   []string{"LPU_VISIBLE_DEVICES=5,2", "NUM_LPU_DEVICES=2"},
		},
		"driver version from env when unknown": {
			devs:      []device.Device{dev(1)},
			opts:      Options{Env: map[string]string{"LPU_DRIVER_VERSION": "9.9"}},
			wantNodes: []string{"/dev/lpu1"},
			wantEnv:   []string{"LPU_VISIBLE_DEVICES=1", "NUM_LPU_DEVICES=1", "LPU_DRIVER_VERSION=9.9"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			e := ForDevices(tc.devs, tc.version, tc.opts)
			var nodes []string
			var want []device.Node
			for _, d := range tc.devs {
				want = append(want, d.NodeList()...)
			}
			for i, n := range e.DeviceNodes {
				nodes = append(nodes, n.Path)
				d := want[i]
				if n.Type != "c" || n.Major != d.Major || n.Minor != d.Minor || n.FileMode != 0o666 {
					t.Errorf("node %d = %+v", i, n)
				}
			}
			if !reflect.DeepEqual(nodes, tc.wantNodes) {
				t.Errorf("nodes = %q, want %q", nodes, tc.wantNodes)
			}
			if !reflect.DeepEqual(e.Mounts, tc.wantMount) {
				t.Errorf("mounts = %v, want %v", e.Mounts, tc.wantMount)
			}
			if !reflect.DeepEqual(e.Env, tc.wantEnv) {
				t.Errorf("env = %q, want %q", e.Env, tc.wantEnv)
			}
		})
	}
}

func TestForDevicesNone(t *testing.T) {
	e := ForDevices(nil, "1", Options{Mounts: []Mount{{HostPath: "/usr/lib/lpu"}}, Env: map[string]string{"A": "b"}})
	if !reflect.DeepEqual(e, Unallocated()) {
		t.Errorf("ForDevices(nil) = %+v, want Unallocated()", e)
	}
}

func TestExistingMounts(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "usr/lib/lpu"), 0o755); err != nil {
		t.Fatal(err)
	}
	kept, missing := ExistingMounts(root, []Mount{{HostPath: "/usr/lib/lpu"}, {HostPath: "/opt/lpu/bin", ContainerPath: "/bin/lpu"}})
	if !reflect.DeepEqual(kept, []Mount{{HostPath: "/usr/lib/lpu"}}) || !reflect.DeepEqual(missing, []string{"/opt/lpu/bin"}) {
		t.Errorf("kept %v missing %v", kept, missing)
	}
}

func TestVisibleDevices(t *testing.T) {
	got, err := VisibleDevices([]string{"lpu7", "lpu0", "lpu1"})
	if err != nil || got != "7,0,1" {
		t.Errorf("VisibleDevices = %q, %v", got, err)
	}
	if _, err := VisibleDevices([]string{"lpu1", "/dev/lpu2"}); err == nil || !strings.Contains(err.Error(), "/dev/lpu2") {
		t.Errorf("bad id: err = %v", err)
	}
}

func TestUnallocated(t *testing.T) {
	e := Unallocated()
	if len(e.DeviceNodes) != 0 || len(e.Mounts) != 0 || !reflect.DeepEqual(e.Env, []string{"LPU_VISIBLE_DEVICES=none"}) {
		t.Errorf("Unallocated = %+v", e)
	}
}

func TestValidEnvKey(t *testing.T) {
	for k, want := range map[string]bool{"A": true, "_a1": true, "LPU_X": true, "": false, "1A": false, "A-B": false, "A=B": false, "Ä": false} {
		if ValidEnvKey(k) != want {
			t.Errorf("ValidEnvKey(%q) = %v", k, !want)
		}
	}
}

// orionDev is an Orion LPU: render node first, then the management node.
func orionDev(i int) device.Device {
	render := device.Node{Path: "/dev/dri/renderD" + strconv.Itoa(128+i), Major: 226, Minor: int64(128 + i)}
	return device.Device{ID: device.ID(i), Index: i, Path: render.Path, Major: render.Major, Minor: render.Minor,
		Nodes: []device.Node{render, {Path: "/dev/xclmgmt" + strconv.Itoa(i), Major: 235, Minor: int64(i)}}}
}

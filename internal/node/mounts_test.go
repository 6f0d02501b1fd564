package node

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hyperaccel/lpu-node/config"
	"github.com/hyperaccel/lpu-node/pkg/device/devicesim"
	"github.com/hyperaccel/lpu-node/pkg/inject"
)

// TestInjectOptionsSimulated runs the mount selection the way it runs
// in a pod: a simulated tree (the root the daemons are given) lives in the
// state dir, whose path is the same on the host as in the pod, so a mount
// the tree carries is injected from the tree's path; on a real root (the
// host seen under /host) only the host path is injected.
func TestInjectOptionsSimulated(t *testing.T) {
	tests := map[string]struct {
		mounts    []config.Mount
		rootFiles []string // created under root
		simulate  bool     // root is a tree lpu-nri simulate wrote
		want      []string // "host->container", host paths with $SIM for the simulated root
	}{
		"simulated library": {
			mounts:   []config.Mount{{HostPath: devicesim.LibDir}},
			simulate: true,
			want:     []string{"$SIM" + devicesim.LibDir + "->" + devicesim.LibDir},
		},
		"simulated tool with container path": {
			mounts:   []config.Mount{{HostPath: devicesim.Tool, ContainerPath: "/bin/lpu-smi"}},
			simulate: true,
			want:     []string{"$SIM" + devicesim.Tool + "->/bin/lpu-smi"},
		},
		"simulated mounts keep their order, missing ones are dropped": {
			mounts:    []config.Mount{{HostPath: "/opt/lpu/fw"}, {HostPath: devicesim.LibDir}, {HostPath: "/opt/lpu/gone"}},
			rootFiles: []string{"/opt/lpu/fw"},
			simulate:  true,
			want:      []string{"$SIM/opt/lpu/fw->/opt/lpu/fw", "$SIM" + devicesim.LibDir + "->" + devicesim.LibDir},
		},
		"real root: the host path of what is under root": {
			mounts:    []config.Mount{{HostPath: devicesim.LibDir}, {HostPath: "/opt/lpu/fw"}},
			rootFiles: []string{"/opt/lpu/fw"},
			want:      []string{"/opt/lpu/fw->/opt/lpu/fw"},
		},
		"real root with a simulated tree's files but no marker": {
			mounts:    []config.Mount{{HostPath: devicesim.LibDir}},
			rootFiles: []string{devicesim.Library},
			want:      []string{devicesim.LibDir + "->" + devicesim.LibDir},
		},
		"nothing anywhere": {
			mounts:   []config.Mount{{HostPath: "/opt/lpu/gone"}},
			simulate: true,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := config.Default()
			cfg.Root = filepath.Join(dir, "host")
			cfg.StateDir = filepath.Join(dir, "state")
			cfg.Injection.Mounts = tc.mounts
			sim := ""
			if tc.simulate {
				sim = filepath.Join(cfg.StateDir, "simulated-node")
				if err := devicesim.WriteNode(sim, 8, ""); err != nil {
					t.Fatal(err)
				}
				cfg.Root = sim
			}
			for _, f := range tc.rootFiles {
				mkfile(t, filepath.Join(cfg.Root, f))
			}
			if err := os.MkdirAll(cfg.Root, 0o755); err != nil {
				t.Fatal(err)
			}
			n, err := Open(cfg, Options{})
			if err != nil {
				t.Fatal(err)
			}
			var gotS []string
			for _, m := range n.Inject.Mounts {
				gotS = append(gotS, m.HostPath+"->"+m.ContainerPath)
			}
			var wantS []string
			for _, w := range tc.want {
				wantS = append(wantS, replaceSim(w, sim))
			}
			if fmt.Sprint(gotS) != fmt.Sprint(wantS) {
				t.Fatalf("mounts %v, want %v", gotS, wantS)
			}
			for _, m := range n.Inject.Mounts {
				if _, err := os.Stat(hostView(cfg.Root, sim, m)); err != nil {
					t.Errorf("injected mount %s does not exist: %v", m.HostPath, err)
				}
			}
		})
	}
}

func mkfile(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

func replaceSim(s, sim string) string {
	if rest, ok := strings.CutPrefix(s, "$SIM"); ok {
		return sim + rest
	}
	return s
}

// hostView is where this process sees a mount's host path: simulated files
// at their own path, the rest under root.
func hostView(root, sim string, m inject.Mount) string {
	if sim != "" && strings.HasPrefix(m.HostPath, sim+"/") {
		return m.HostPath
	}
	return filepath.Join(root, m.HostPath)
}

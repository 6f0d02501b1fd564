package node

import (
	"cmp"
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
// in a pod: the host is seen under a root that does not show the state dir,
// so a simulated driver file exists only where this process sees the state
// dir. It must be injected from the simulated tree all the same.
func TestInjectOptionsSimulated(t *testing.T) {
	tests := map[string]struct {
		mounts    []config.Mount
		hostFiles []string // created under root
		stateView bool     // also show the state dir under root (the old chart workaround)
		simulate  bool
		want      []string // "host->container", host paths with $SIM for the simulated root
	}{
		"simulated library, state dir not under root": {
			mounts:   []config.Mount{{HostPath: devicesim.LibDir}},
			simulate: true,
			want:     []string{"$SIM" + devicesim.LibDir + "->" + devicesim.LibDir},
		},
		"simulated library, state dir also under root": {
			mounts:    []config.Mount{{HostPath: devicesim.LibDir}},
			simulate:  true,
			stateView: true,
			want:      []string{"$SIM" + devicesim.LibDir + "->" + devicesim.LibDir},
		},
		"simulated tool with container path": {
			mounts:   []config.Mount{{HostPath: devicesim.Tool, ContainerPath: "/bin/lpu-smi"}},
			simulate: true,
			want:     []string{"$SIM" + devicesim.Tool + "->/bin/lpu-smi"},
		},
		"host mount next to simulated ones keeps its order": {
			mounts:    []config.Mount{{HostPath: "/opt/lpu/fw"}, {HostPath: devicesim.LibDir}, {HostPath: "/opt/lpu/gone"}},
			hostFiles: []string{"/opt/lpu/fw"},
			simulate:  true,
			want:      []string{"/opt/lpu/fw->/opt/lpu/fw", "$SIM" + devicesim.LibDir + "->" + devicesim.LibDir},
		},
		"not simulated: only what is under root": {
			mounts:    []config.Mount{{HostPath: devicesim.LibDir}, {HostPath: "/opt/lpu/fw"}},
			hostFiles: []string{"/opt/lpu/fw"},
			want:      []string{"/opt/lpu/fw->/opt/lpu/fw"},
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
			for _, f := range tc.hostFiles {
				mkfile(t, filepath.Join(cfg.Root, f))
			}
			if err := os.MkdirAll(cfg.Root, 0o755); err != nil {
				t.Fatal(err)
			}
			sim, simulate := "", 0
			if tc.simulate {
				sim, simulate = devicesim.Root(cfg.StateDir), 8
			}
			if tc.stateView {
				if err := os.MkdirAll(filepath.Dir(filepath.Join(cfg.Root, cfg.StateDir)), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(cfg.StateDir, filepath.Join(cfg.Root, cfg.StateDir)); err != nil {
					t.Fatal(err)
				}
			}
			n, err := Open(cfg, Options{Simulate: simulate})
			if err != nil {
				t.Fatal(err)
			}
			if n.Root != cmp.Or(sim, cfg.Root) {
				t.Fatalf("root %s, want %s", n.Root, cmp.Or(sim, cfg.Root))
			}
			got := n.Inject
			var gotS []string
			for _, m := range got.Mounts {
				gotS = append(gotS, m.HostPath+"->"+m.ContainerPath)
			}
			var wantS []string
			for _, w := range tc.want {
				wantS = append(wantS, replaceSim(w, sim))
			}
			if fmt.Sprint(gotS) != fmt.Sprint(wantS) {
				t.Fatalf("mounts %v, want %v", gotS, wantS)
			}
			for _, m := range got.Mounts {
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

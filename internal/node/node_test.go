package node

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hyperaccel/lpu-node/config"
)

func testConfig(t *testing.T) *config.Config {
	t.Helper()
	dir := t.TempDir()
	cfg := config.Default()
	cfg.Root = filepath.Join(dir, "host")
	cfg.StateDir = filepath.Join(dir, "state")
	if err := os.MkdirAll(cfg.Root, 0o755); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestOpenKubeletRoot: a command that talks to the kubelet fails at start,
// on one line naming the field and the value, when the config names a
// kubelet root that does not exist; others do not look.
func TestOpenKubeletRoot(t *testing.T) {
	tests := map[string]struct {
		root    string // "" keeps the default; "$TMP" is a temp dir
		kubelet bool
		wantErr string
	}{
		"default root is not checked": {kubelet: true},
		"existing root":               {root: "$TMP", kubelet: true},
		"missing root":                {root: "/nonexistent/kubelet", kubelet: true, wantErr: `kubelet.rootDir: "/nonexistent/kubelet" does not exist`},
		"missing root, no kubelet":    {root: "/nonexistent/kubelet"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			cfg := testConfig(t)
			switch tc.root {
			case "$TMP":
				cfg.Kubelet.RootDir = t.TempDir()
			case "":
			default:
				cfg.Kubelet.RootDir = tc.root
			}
			_, err := Open(cfg, Options{Kubelet: tc.kubelet})
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("Open = %v", err)
			case tc.wantErr != "" && (err == nil || err.Error() != tc.wantErr):
				t.Fatalf("Open = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

// TestSealKey: the key is bound to the node's name (Options.Name over
// NODE_NAME), read once, and a bad name fails only SealKey, not Open.
func TestSealKey(t *testing.T) {
	tests := map[string]struct {
		name, env, wantName, wantErr string
	}{
		"NODE_NAME":           {env: "node-a", wantName: "node-a"},
		"flag over NODE_NAME": {name: "node-b", env: "node-a", wantName: "node-b"},
		"bad name":            {env: "bad name", wantErr: `"bad name"`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			cfg := testConfig(t)
			n, err := Open(cfg, Options{Name: tc.name, Getenv: func(k string) string {
				if k == "NODE_NAME" {
					return tc.env
				}
				return ""
			}})
			if err != nil {
				t.Fatal(err)
			}
			key, err := n.SealKey()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("SealKey = %v, want an error naming %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got, _ := n.Name(); got != tc.wantName || key.Node() != tc.wantName {
				t.Errorf("Name = %q, want %q", got, tc.wantName)
			}
			if key.Path() != filepath.Join(cfg.StateDir, filepath.Base(key.Path())) {
				t.Errorf("key at %s, want in %s", key.Path(), cfg.StateDir)
			}
			if again, _ := n.SealKey(); again != key {
				t.Error("SealKey read the key twice")
			}
		})
	}
}

// TestHealthOptions: the monitor's options are the config's health
// section.
func TestHealthOptions(t *testing.T) {
	cfg := testConfig(t)
	cfg.Health.ResyncInterval.Duration = 7 * time.Second
	cfg.Health.PollInterval.Duration = 300 * time.Millisecond
	cfg.Health.ProbeInterval.Duration = 50 * time.Millisecond
	cfg.Health.FailureThreshold, cfg.Health.RecoveryThreshold = 3, 4
	n, err := Open(cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := n.HealthOptions()
	if h.ResyncInterval != 7*time.Second || h.PollInterval != 300*time.Millisecond || h.ProbeInterval != 50*time.Millisecond ||
		h.FailureThreshold != 3 || h.RecoveryThreshold != 4 || h.Logger == nil {
		t.Errorf("HealthOptions = %+v", h)
	}
	if n.Root != cfg.Root {
		t.Errorf("root %s, want %s", n.Root, cfg.Root)
	}
}

// TestOpenRoot: a discovery root that does not exist, or is a file, fails
// Open on one line naming the field and the value (a typo would otherwise
// serve an empty node).
func TestOpenRoot(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		root    string
		wantErr string
	}{
		"existing": {root: dir},
		"missing":  {root: filepath.Join(dir, "gone"), wantErr: `root: "` + filepath.Join(dir, "gone") + `" does not exist`},
		"a file":   {root: file, wantErr: `root: "` + file + `" is not a directory`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			cfg := testConfig(t)
			cfg.Root = tc.root
			_, err := Open(cfg, Options{})
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("Open = %v", err)
			case tc.wantErr != "" && (err == nil || err.Error() != tc.wantErr):
				t.Fatalf("Open = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

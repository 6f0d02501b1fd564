package daemon

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hyperaccel/lpu-node/config"
	"github.com/hyperaccel/lpu-node/internal/cmdline"
	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/device/devicesim"
)

// parsed is a parsed command line: the options, the command chosen (its
// name in Command) and what applies the flags to a config.
type parsed struct {
	*Options
	Command string
	cmd     *cmdline.Command
}

func (p parsed) Apply(c *config.Config) error { return p.cmd.Apply(c) }

// Parse parses args and the environment as main does.
func Parse(args []string, lookupEnv func(string) (string, bool)) (parsed, error) {
	o := &Options{}
	cmd, err := cmdline.Parse(args, lookupEnv, NewCommands(o).All()...)
	if err != nil {
		return parsed{}, err
	}
	return parsed{o, cmd.Name, cmd}, nil
}

var ErrHelp = cmdline.ErrHelp

const (
	CmdCDIGenerate = "cdi generate"
	CmdDoctor      = "doctor"
)

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestParsePrecedence(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(file, []byte("version: v1\nroot: /file-root\nstateDir: /file-state\nnri:\n  pluginIndex: \"20\"\n  socket: /file/nri.sock\nmetrics:\n  address: 127.0.0.1:1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		args    []string
		env     map[string]string
		root    string
		state   string
		idx     string
		socket  string
		metrics string
		cmd     string
		cdiDir  string
	}{
		"file over default": {
			args: []string{"--config", file},
			root: "/file-root", state: "/file-state", idx: "20", socket: "/file/nri.sock", metrics: "127.0.0.1:1",
		},
		"env over file": {
			args: []string{"--config", file},
			env:  map[string]string{"LPU_ROOT": "/env-root", "LPU_PLUGIN_IDX": "30", "LPU_METRICS_ADDR": ""},
			root: "/env-root", state: "/file-state", idx: "30", socket: "/file/nri.sock", metrics: "",
		},
		"flag over env": {
			args: []string{"--config", file, "--root", "/flag-root", "--plugin-idx", "05"},
			env:  map[string]string{"LPU_ROOT": "/env-root", "LPU_PLUGIN_IDX": "30", "LPU_NRI_SOCKET": "/env/nri.sock"},
			root: "/flag-root", state: "/file-state", idx: "05", socket: "/env/nri.sock", metrics: "127.0.0.1:1",
		},
		"config from env": {
			env:  map[string]string{"LPU_CONFIG": file},
			root: "/file-root", state: "/file-state", idx: "20", socket: "/file/nri.sock", metrics: "127.0.0.1:1",
		},
		"defaults": {
			root: config.DefaultRoot, state: config.DefaultStateDir, idx: config.DefaultPluginIndex, socket: config.DefaultNRISocket,
		},
		"flags before and after a command": {
			args: []string{"--root", "/before", "cdi", "generate", "--output", "/out", "--state-dir", "/after"},
			root: "/before", state: "/after", idx: config.DefaultPluginIndex, socket: config.DefaultNRISocket,
			cmd: CmdCDIGenerate, cdiDir: "/out",
		},
		"doctor": {
			args: []string{"doctor", "--kubelet-dir", "/kd"},
			root: config.DefaultRoot, state: config.DefaultStateDir, idx: config.DefaultPluginIndex, socket: config.DefaultNRISocket,
			cmd: CmdDoctor,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			o, err := Parse(tc.args, env(tc.env))
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := config.Load(o.ConfigFile)
			if err != nil {
				t.Fatal(err)
			}
			if err := o.Apply(cfg); err != nil {
				t.Fatal(err)
			}
			got := []string{cfg.Root, cfg.StateDir, cfg.NRI.PluginIndex, cfg.NRI.Socket, cfg.Metrics.Address, o.Command}
			want := []string{tc.root, tc.state, tc.idx, tc.socket, tc.metrics, tc.cmd}
			if strings.Join(got, "|") != strings.Join(want, "|") {
				t.Fatalf("root|state|idx|socket|metrics|cmd = %q, want %q", got, want)
			}
			if tc.cdiDir != "" && cfg.CDI.SpecDir != tc.cdiDir {
				t.Fatalf("cdi.specDir = %q, want %q", cfg.CDI.SpecDir, tc.cdiDir)
			}
			if tc.cmd == CmdDoctor && cfg.Kubelet.DevicePluginDir != "/kd" {
				t.Fatalf("kubelet dir = %q", cfg.Kubelet.DevicePluginDir)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	tests := map[string]struct {
		args []string
		env  map[string]string
		says string
	}{
		"bad mode":              {args: []string{"--mode", "auto2"}, says: `mode "auto2"`},
		"bad index":             {args: []string{"--plugin-idx", "7"}, says: "plugin-idx"},
		"bad index from env":    {env: map[string]string{"LPU_PLUGIN_IDX": "x1"}, says: "plugin-idx"},
		"no --simulate":         {args: []string{"--simulate", "8"}, says: "unknown flag --simulate"},
		"lpus on the daemon":    {args: []string{"--lpus", "8"}, says: "only for simulate"},
		"simulate: bad backend": {args: []string{"simulate"}, env: map[string]string{"LPU_SIMULATE_BACKEND": "fpga"}, says: `--backend "fpga": want lpu, xilinx or pci`},
		"simulate: too many":    {args: []string{"simulate", "--lpus", "5000"}, says: "simulate 5000 LPUs: want 1 to 1024"},
		"simulate: bad env":     {args: []string{"simulate"}, env: map[string]string{"LPU_SIMULATE_LPUS": "many"}, says: "LPU_SIMULATE_LPUS"},
		"simulate: no --mode":   {args: []string{"simulate", "--mode", "cdi"}, says: "--mode"},
		"relative root":         {args: []string{"--root", "host"}, says: "absolute"},
		"unknown command":       {args: []string{"serve"}, says: `unknown command "serve"`},
		"cdi without verb":      {args: []string{"cdi"}, says: "cdi generate"},
		"extra argument":        {args: []string{"cdi", "list", "x"}, says: `unexpected argument "x"`},
		"output without cdi":    {args: []string{"--output", "/x"}, says: "only for cdi generate"},
		"metrics with doctor":   {args: []string{"doctor", "--metrics-addr", ":1"}, says: "only for daemon"},
		"unknown flag":          {args: []string{"--frobnicate"}, says: "frobnicate"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := Parse(tc.args, env(tc.env))
			if err == nil || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("Parse = %v, want an error saying %q", err, tc.says)
			}
		})
	}
	if _, err := Parse([]string{"--help"}, nil); !errors.Is(err, ErrHelp) {
		t.Fatalf("--help: %v", err)
	}
	if _, err := Parse([]string{"doctor", "-h"}, nil); !errors.Is(err, ErrHelp) {
		t.Fatalf("doctor -h: %v", err)
	}
}

func TestUsageNamesEveryFlagAndTwin(t *testing.T) {
	var b bytes.Buffer
	Usage(&b)
	for _, s := range allFlags() {
		if !strings.Contains(b.String(), "--"+s.Name) || !strings.Contains(b.String(), "["+s.Env+"]") {
			t.Errorf("usage lacks --%s [%s]", s.Name, s.Env)
		}
	}
	for _, w := range []string{"flag > environment > config file > built-in default", "cdi generate", "cdi list", "doctor", "--version"} {
		if !strings.Contains(b.String(), w) {
			t.Errorf("usage lacks %q", w)
		}
	}
}

// TestResolveMode: lpu-nri resolves auto with the same rule as the device
// plugin (config.ResolveInjection, tested there); here only the wiring.
func TestResolveMode(t *testing.T) {
	cfg := config.Default()
	cfg.NRI.Socket = filepath.Join(t.TempDir(), "nri.sock")
	if m, why := ResolveMode(cfg); m != config.InjectionCDI || !strings.Contains(why, cfg.NRI.Socket) {
		t.Fatalf("auto without socket = %s (%s), want cdi naming the socket", m, why)
	}
	cfg.Injection.Mode = config.InjectionNRI
	if m, _ := ResolveMode(cfg); m != config.InjectionNRI {
		t.Fatalf("configured nri = %s", m)
	}
}

// allFlags returns the flags of every command, each once.
func allFlags() []*cmdline.Flag {
	var out []*cmdline.Flag
	seen := map[string]bool{}
	for _, c := range NewCommands(&Options{}).All() {
		for _, f := range c.Flags() {
			if !seen[f.Name] && f.Env != "" {
				seen[f.Name] = true
				out = append(out, f)
			}
		}
	}
	return out
}

// TestSimulateCommand: lpu-nri simulate writes the node its flags ask for
// (count and layout, the backend over the config's simulate.backend)
// under --root, and a daemon given that root discovers it with the
// config's discovery.backend set to the same layout.
func TestSimulateCommand(t *testing.T) {
	root := filepath.Join(t.TempDir(), "simulated-node")
	p, err := Parse([]string{"simulate", "--root", root, "--lpus", "16"}, env(map[string]string{"LPU_SIMULATE_BACKEND": "xilinx"}))
	if err != nil {
		t.Fatal(err)
	}
	if p.Command != "simulate" {
		t.Fatalf("command %q", p.Command)
	}
	cfg := config.Default()
	if err := p.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := devicesim.WriteNodeTo(&out, cfg.Root, p.LPUs, cfg.Simulate.Backend); err != nil {
		t.Fatal(err)
	}
	if want := "wrote 16 LPUs in 2 rings (xilinx layout) under " + root + "\n"; out.String() != want {
		t.Errorf("said %q, want %q", out.String(), want)
	}
	cfg.Discovery.Backend = device.BackendXilinx
	inv, err := device.NewSysfs(root, cfg.DiscoveryOptions()...).Discover(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.Devices) != 16 || !inv.Devices[15].Health.Healthy {
		t.Fatalf("discovered %d LPUs (last %+v), want 16 healthy", len(inv.Devices), inv.Devices[len(inv.Devices)-1].Health)
	}
	// Run again over a host-like root, it refuses and writes nothing.
	host := t.TempDir()
	if err := os.Mkdir(filepath.Join(host, "sys"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg.Root = host
	if err := devicesim.WriteNodeTo(&out, cfg.Root, 8, cfg.Simulate.Backend); !errors.Is(err, devicesim.ErrNotSimulation) {
		t.Fatalf("Simulate over a host-like root = %v, want ErrNotSimulation", err)
	}
}

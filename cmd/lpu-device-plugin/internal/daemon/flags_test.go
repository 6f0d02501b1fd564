package daemon

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/hyperaccel/lpu-node/config"
	"github.com/hyperaccel/lpu-node/internal/cmdline"
	"github.com/hyperaccel/lpu-node/internal/nfd"
)

// parsed is a parsed command line: the options and the command that
// applies the flags to a config.
type parsed struct {
	*Options
	cmd *cmdline.Command
}

func (p parsed) Apply(c *config.Config) error { return p.cmd.Apply(c) }

// Parse parses args and the environment as main does.
func Parse(args []string, lookupEnv func(string) (string, bool)) (parsed, error) {
	o := &Options{}
	cmd, err := cmdline.Parse(args, lookupEnv, Command(o))
	return parsed{o, cmd}, err
}

var ErrHelp = cmdline.ErrHelp

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

func TestPrecedence(t *testing.T) {
	tests := map[string]struct {
		args    []string
		env     map[string]string
		file    func(*config.Config)
		check   func(t *testing.T, o parsed, c *config.Config)
		wantErr string
	}{
		"defaults": {
			check: func(t *testing.T, o parsed, c *config.Config) {
				if c.Root != "/" || c.Kubelet.DevicePluginDir != "/var/lib/kubelet/device-plugins" || c.StateDir != config.DefaultStateDir ||
					c.Injection.Mode != config.InjectionAuto || c.Metrics.Address != "" || o.NFD.File != nfd.DefaultPath || o.NFD.Given {
					t.Fatalf("defaults: %+v %+v", o, c)
				}
			},
		},
		"file over default": {
			file: func(c *config.Config) { c.Root = "/host"; c.Metrics.Address = ":9400" },
			check: func(t *testing.T, o parsed, c *config.Config) {
				if c.Root != "/host" || c.Metrics.Address != ":9400" {
					t.Fatalf("root %q metrics %q", c.Root, c.Metrics.Address)
				}
			},
		},
		"env over file": {
			env:  map[string]string{"LPU_ROOT": "/envroot", "LPU_INJECTION": "cdi"},
			file: func(c *config.Config) { c.Root = "/host"; c.Injection.Mode = "nri" },
			check: func(t *testing.T, o parsed, c *config.Config) {
				if c.Root != "/envroot" || c.Injection.Mode != "cdi" {
					t.Fatalf("root %q injection %q", c.Root, c.Injection.Mode)
				}
			},
		},
		"flag over env": {
			args: []string{"--root", "/flagroot", "--kubelet-dir=/k", "--state-dir", "/s", "--metrics-addr", "127.0.0.1:1", "--injection", "nri"},
			env:  map[string]string{"LPU_ROOT": "/envroot", "LPU_KUBELET_DIR": "/ek", "LPU_METRICS_ADDR": ":2"},
			check: func(t *testing.T, o parsed, c *config.Config) {
				if c.Root != "/flagroot" || c.Kubelet.DevicePluginDir != "/k" || c.StateDir != "/s" ||
					c.Metrics.Address != "127.0.0.1:1" || c.Injection.Mode != "nri" {
					t.Fatalf("%+v", c)
				}
			},
		},
		"empty env disables metrics": {
			env:  map[string]string{"LPU_METRICS_ADDR": "", "LPU_NFD_FEATURES_FILE": ""},
			file: func(c *config.Config) { c.Metrics.Address = ":9400" },
			check: func(t *testing.T, o parsed, c *config.Config) {
				if c.Metrics.Address != "" || o.NFD.File != "" || !o.NFD.Given {
					t.Fatalf("metrics %q nfd %q given %v", c.Metrics.Address, o.NFD.File, o.NFD.Given)
				}
			},
		},
		"config path from env": {
			env: map[string]string{"LPU_CONFIG": "/etc/lpu/config.yaml"},
			check: func(t *testing.T, o parsed, c *config.Config) {
				if o.ConfigFile != "/etc/lpu/config.yaml" {
					t.Fatalf("config %q", o.ConfigFile)
				}
			},
		},
		"bad injection":       {args: []string{"--injection", "docker"}, wantErr: `injection "docker"`},
		"no --simulate":       {args: []string{"--simulate", "8"}, wantErr: "unknown flag --simulate"},
		"relative root":       {args: []string{"--root", "host"}, wantErr: `root "host"`},
		"positional argument": {args: []string{"serve"}, wantErr: `unexpected argument "serve"`},
		"unknown flag":        {args: []string{"--kubelet-socket", "/x"}, wantErr: "kubelet-socket"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			o, err := Parse(tc.args, env(tc.env))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			c := config.Default()
			if tc.file != nil {
				tc.file(c)
			}
			if err := o.Apply(c); err != nil {
				t.Fatal(err)
			}
			tc.check(t, o, c)
		})
	}
}

func TestHelpAndVersion(t *testing.T) {
	if _, err := Parse([]string{"--help"}, nil); !errors.Is(err, ErrHelp) {
		t.Fatalf("--help: %v", err)
	}
	o, err := Parse([]string{"--version"}, nil)
	if err != nil || !o.Version {
		t.Fatalf("--version: %v %v", o, err)
	}
	var b bytes.Buffer
	Usage(&b)
	for _, s := range Command(&Options{}).Flags() {
		if !strings.Contains(b.String(), "--"+s.Name) || !strings.Contains(b.String(), s.Env) {
			t.Errorf("help lacks --%s or %s", s.Name, s.Env)
		}
	}
	for _, want := range []string{"--version", "flag > environment > config file", "LPU_LOG_LEVEL", "NODE_NAME", "/healthz"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("help lacks %q", want)
		}
	}
}

package daemon

import (
	"bytes"
	"strings"
	"testing"

	"github.com/hyperaccel/lpu-node/config"
	"github.com/hyperaccel/lpu-node/internal/cmdline"
)

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestFlags(t *testing.T) {
	tests := map[string]struct {
		args    []string
		env     map[string]string
		check   func(t *testing.T, o *Options, c *config.Config)
		wantErr string
	}{
		"minimal": {args: []string{"--node-name", "n1"}, check: func(t *testing.T, o *Options, c *config.Config) {
			plugin, registry := o.KubeletDirs(c)
			if o.NodeName != "n1" || o.Kubeconfig != "" || plugin != "/var/lib/kubelet/plugins/lpu.hyperaccel.ai" || registry != "/var/lib/kubelet/plugins_registry" ||
				c.CDI.SpecDir != config.DefaultCDISpecDir || c.StateDir != config.DefaultStateDir {
				t.Fatalf("%+v %+v", o, c)
			}
		}},
		"env twins": {env: map[string]string{"NODE_NAME": "n2", "KUBECONFIG": "/k", "LPU_CDI_DIR": "/c", "LPU_PLUGIN_DIR": "/p",
			"LPU_REGISTRY_DIR": "/r", "LPU_STATE_DIR": "/s", "LPU_ROOT": "/h", "LPU_METRICS_ADDR": ":1"},
			check: func(t *testing.T, o *Options, c *config.Config) {
				plugin, registry := o.KubeletDirs(c)
				if o.NodeName != "n2" || o.Kubeconfig != "/k" || c.CDI.SpecDir != "/c" || plugin != "/p" || registry != "/r" ||
					c.StateDir != "/s" || c.Root != "/h" || c.Metrics.Address != ":1" {
					t.Fatalf("%+v %+v", o, c)
				}
			}},
		"flag over env": {args: []string{"--node-name=a", "--cdi-dir=/x"}, env: map[string]string{"NODE_NAME": "b", "LPU_CDI_DIR": "/y"},
			check: func(t *testing.T, o *Options, c *config.Config) {
				if o.NodeName != "a" || c.CDI.SpecDir != "/x" {
					t.Fatalf("%+v %+v", o, c)
				}
			}},
		"no node": {wantErr: "node-name"},
		// --version answers without the flags a run needs.
		"version without node": {args: []string{"--version"}, check: func(t *testing.T, o *Options, c *config.Config) {
			if !o.Version {
				t.Fatalf("%+v", o)
			}
		}},
		"relative cdi":  {args: []string{"--node-name=a", "--cdi-dir=cdi"}, wantErr: "cdi-dir"},
		"no --simulate": {args: []string{"--node-name=a", "--simulate=8"}, wantErr: "unknown flag --simulate"},
		"stray arg":     {args: []string{"--node-name=a", "x"}, wantErr: "x"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			o := &Options{}
			cmd, err := cmdline.Parse(tc.args, env(tc.env), Command(o))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			c, err := config.Load("")
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Apply(c); err != nil {
				t.Fatal(err)
			}
			tc.check(t, o, c)
		})
	}
}

func TestUsageNamesEveryFlag(t *testing.T) {
	var b bytes.Buffer
	Usage(&b)
	for _, f := range Command(&Options{}).Flags() {
		if !strings.Contains(b.String(), "--"+f.Name) || (f.Env != "" && !strings.Contains(b.String(), f.Env)) {
			t.Errorf("help lacks --%s or %s", f.Name, f.Env)
		}
	}
}

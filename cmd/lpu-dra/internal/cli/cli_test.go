package cli

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	"github.com/hyperaccel/lpu-node/config"
)

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestParse(t *testing.T) {
	tests := map[string]struct {
		args    []string
		env     map[string]string
		want    Options
		wantErr string
	}{
		"minimal": {args: []string{"--node-name", "n1"},
			want: Options{NodeName: "n1", PluginDir: DefaultPluginDir, RegistryDir: DefaultRegistryDir}},
		"env twins": {env: map[string]string{"NODE_NAME": "n2", "KUBECONFIG": "/k", "LPU_CDI_DIR": "/c", "LPU_PLUGIN_DIR": "/p", "LPU_REGISTRY_DIR": "/r", "LPU_SIMULATE": "8"},
			want: Options{NodeName: "n2", Kubeconfig: "/k", CDIDir: "/c", PluginDir: "/p", RegistryDir: "/r", Simulate: 8}},
		"flag over env": {args: []string{"--node-name=a"}, env: map[string]string{"NODE_NAME": "b"},
			want: Options{NodeName: "a", PluginDir: DefaultPluginDir, RegistryDir: DefaultRegistryDir}},
		"no node":       {wantErr: "--node-name (or NODE_NAME) is required"},
		"relative cdi":  {args: []string{"--node-name=a", "--cdi-dir=cdi"}, wantErr: "cdi-dir"},
		"bad simulate":  {args: []string{"--node-name=a", "--simulate=-1"}, wantErr: "simulate"},
		"stray arg":     {args: []string{"--node-name=a", "x"}, wantErr: `unexpected argument "x"`},
		"version alone": {args: []string{"--version"}, want: Options{Version: true, PluginDir: DefaultPluginDir, RegistryDir: DefaultRegistryDir}},
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
			o.given = nil
			if !reflect.DeepEqual(*o, tc.want) {
				t.Fatalf("got %+v, want %+v", *o, tc.want)
			}
		})
	}
}

func TestApply(t *testing.T) {
	o, err := Parse([]string{"--node-name=a", "--cdi-dir=/c", "--state-dir=/s", "--root=/r", "--metrics-addr=127.0.0.1:0"}, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	c, err := config.Load("")
	if err != nil {
		t.Fatal(err)
	}
	if c.CDI.SpecDir != config.DefaultCDISpecDir {
		t.Fatalf("default cdi dir %s", c.CDI.SpecDir)
	}
	if err := o.Apply(c); err != nil {
		t.Fatal(err)
	}
	if c.CDI.SpecDir != "/c" || c.StateDir != "/s" || c.Root != "/r" || c.Metrics.Address != "127.0.0.1:0" {
		t.Fatalf("config after Apply: %+v", c)
	}
}

func TestUsageNamesEveryFlag(t *testing.T) {
	var b bytes.Buffer
	Usage(&b)
	for _, f := range specs {
		if !strings.Contains(b.String(), "--"+f.Name) || !strings.Contains(b.String(), f.Env) {
			t.Errorf("help lacks --%s or %s", f.Name, f.Env)
		}
	}
}

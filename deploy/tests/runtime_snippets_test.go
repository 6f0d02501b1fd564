package tests_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pelletier/go-toml/v2"
	"sigs.k8s.io/yaml"

	"github.com/hyperaccel/lpu-node/deploy/charttest"
)

// The keys below are the containerd and CRI-O option names the snippets rely
// on (containerd v2.4.2 internal/nri and internal/cri/config, NRI v0.12.3
// default-validator, containerd 1.7 CRI config, crio.conf(5)). Decoding is
// strict, so a misspelt key in a snippet fails here instead of being ignored
// by the runtime.

type nriValidator struct {
	Enable                                bool     `toml:"enable"`
	RejectOCIHookAdjustment               bool     `toml:"reject_oci_hook_adjustment"`
	RejectRuntimeDefaultSeccompAdjustment bool     `toml:"reject_runtime_default_seccomp_adjustment"`
	RejectUnconfinedSeccompAdjustment     bool     `toml:"reject_unconfined_seccomp_adjustment"`
	RejectCustomSeccompAdjustment         bool     `toml:"reject_custom_seccomp_adjustment"`
	RejectNamespaceAdjustment             bool     `toml:"reject_namespace_adjustment"`
	RejectSysctlAdjustment                bool     `toml:"reject_sysctl_adjustment"`
	RequiredPlugins                       []string `toml:"required_plugins"`
	TolerateMissingPluginsAnnotation      string   `toml:"tolerate_missing_plugins_annotation"`
}

type containerdNRI struct {
	Disable                   *bool         `toml:"disable"`
	DisableConnections        bool          `toml:"disable_connections"`
	SocketPath                string        `toml:"socket_path"`
	PluginPath                string        `toml:"plugin_path"`
	PluginConfigPath          string        `toml:"plugin_config_path"`
	PluginRegistrationTimeout string        `toml:"plugin_registration_timeout"`
	PluginRequestTimeout      string        `toml:"plugin_request_timeout"`
	DefaultValidator          *nriValidator `toml:"default_validator"`
}

type containerd2Snippet struct {
	Version int `toml:"version"`
	Plugins struct {
		CRIRuntime struct {
			CDISpecDirs []string `toml:"cdi_spec_dirs"`
		} `toml:"io.containerd.cri.v1.runtime"`
		NRI containerdNRI `toml:"io.containerd.nri.v1.nri"`
	} `toml:"plugins"`
}

type containerd17Snippet struct {
	Version int `toml:"version"`
	Plugins struct {
		CRI struct {
			EnableCDI   bool     `toml:"enable_cdi"`
			CDISpecDirs []string `toml:"cdi_spec_dirs"`
		} `toml:"io.containerd.grpc.v1.cri"`
		NRI containerdNRI `toml:"io.containerd.nri.v1.nri"`
	} `toml:"plugins"`
}

type crioSnippet struct {
	Crio struct {
		Runtime struct {
			CDISpecDirs []string `toml:"cdi_spec_dirs"`
		} `toml:"runtime"`
		NRI struct {
			EnableNRI           bool   `toml:"enable_nri"`
			Listen              string `toml:"nri_listen"`
			DisableConnections  bool   `toml:"nri_disable_connections"`
			PluginDir           string `toml:"nri_plugin_dir"`
			PluginConfigDir     string `toml:"nri_plugin_config_dir"`
			RegistrationTimeout string `toml:"nri_plugin_registration_timeout"`
			RequestTimeout      string `toml:"nri_plugin_request_timeout"`
			DefaultValidator    *struct {
				Enable                           bool     `toml:"nri_enable_default_validator"`
				RejectOCIHookAdjustment          bool     `toml:"nri_validator_reject_oci_hook_adjustment"`
				RejectNamespaceAdjustment        bool     `toml:"nri_validator_reject_namespace_adjustment"`
				RequiredPlugins                  []string `toml:"nri_validator_required_plugins"`
				TolerateMissingPluginsAnnotation string   `toml:"nri_validator_tolerate_missing_plugins_annotation"`
			} `toml:"default_validator"`
		} `toml:"nri"`
	} `toml:"crio"`
}

// chartValues are the chart defaults the snippets must agree with.
type chartValues struct {
	Config struct {
		NRI struct {
			Socket      string `json:"socket"`
			PluginName  string `json:"pluginName"`
			PluginIndex string `json:"pluginIndex"`
		} `json:"nri"`
		CDI struct {
			SpecDir string `json:"specDir"`
		} `json:"cdi"`
	} `json:"config"`
	NRI struct {
		TolerateMissingPluginsAnnotation string `json:"tolerateMissingPluginsAnnotation"`
	} `json:"nri"`
}

func loadChartValues(t *testing.T) chartValues {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var v chartValues
	if err := yaml.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func decodeTOMLStrict(t *testing.T, file string, v any) {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	dec := toml.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var strict *toml.StrictMissingError
		if errors.As(err, &strict) {
			t.Fatalf("%s: unknown keys:\n%s", file, strict.String())
		}
		t.Fatalf("%s: %v", file, err)
	}
}

func TestRuntimeSnippets(t *testing.T) {
	vals := loadChartValues(t)
	checkNRI := func(t *testing.T, n containerdNRI) {
		t.Helper()
		if n.Disable == nil || *n.Disable {
			t.Error("NRI: disable is not explicitly false")
		}
		if n.DisableConnections {
			t.Error("NRI: external plugin connections disabled; lpu-nri connects as one")
		}
		if n.SocketPath != vals.Config.NRI.Socket {
			t.Errorf("NRI socket_path = %q, chart config nri.socket = %q", n.SocketPath, vals.Config.NRI.Socket)
		}
	}
	checkCDIDirs := func(t *testing.T, dirs []string) {
		t.Helper()
		if !slices.Contains(dirs, vals.Config.CDI.SpecDir) {
			t.Errorf("cdi_spec_dirs = %v, lack the chart's cdi.specDir %s", dirs, vals.Config.CDI.SpecDir)
		}
	}

	t.Run("containerd-2.x.toml", func(t *testing.T) {
		var s containerd2Snippet
		decodeTOMLStrict(t, "runtime/containerd-2.x.toml", &s)
		if s.Version != 3 {
			t.Errorf("version = %d, want 3 (an import without it is migrated as version 1)", s.Version)
		}
		checkCDIDirs(t, s.Plugins.CRIRuntime.CDISpecDirs)
		checkNRI(t, s.Plugins.NRI)
		v := s.Plugins.NRI.DefaultValidator
		if v == nil || !v.Enable {
			t.Fatal("NRI default_validator is not enabled")
		}
		if len(v.RequiredPlugins) != 0 {
			t.Errorf("required_plugins = %v: a global requirement stops every container on the node while lpu-nri is down; the chart's admission policy gates LPU pods only", v.RequiredPlugins)
		}
		if v.TolerateMissingPluginsAnnotation == "" || v.TolerateMissingPluginsAnnotation != vals.NRI.TolerateMissingPluginsAnnotation {
			t.Errorf("tolerate_missing_plugins_annotation = %q, chart annotates its pod with %q",
				v.TolerateMissingPluginsAnnotation, vals.NRI.TolerateMissingPluginsAnnotation)
		}
		if v.RejectOCIHookAdjustment || v.RejectNamespaceAdjustment || v.RejectSysctlAdjustment {
			t.Error("the snippet turns on unrelated validator rejections")
		}
	})
	t.Run("containerd-1.7.toml", func(t *testing.T) {
		var s containerd17Snippet
		decodeTOMLStrict(t, "runtime/containerd-1.7.toml", &s)
		if s.Version != 2 {
			t.Errorf("version = %d, want 2", s.Version)
		}
		if !s.Plugins.CRI.EnableCDI {
			t.Error("enable_cdi is not true (1.7 has CDI off by default)")
		}
		checkCDIDirs(t, s.Plugins.CRI.CDISpecDirs)
		checkNRI(t, s.Plugins.NRI)
		if s.Plugins.NRI.DefaultValidator != nil {
			t.Error("containerd 1.7 has no NRI validator")
		}
	})
	t.Run("crio-nri-cdi.conf", func(t *testing.T) {
		var s crioSnippet
		decodeTOMLStrict(t, "runtime/crio-nri-cdi.conf", &s)
		checkCDIDirs(t, s.Crio.Runtime.CDISpecDirs)
		if !s.Crio.NRI.EnableNRI {
			t.Error("enable_nri is not true")
		}
		if s.Crio.NRI.DisableConnections {
			t.Error("nri_disable_connections is true; lpu-nri connects as an external plugin")
		}
		if s.Crio.NRI.Listen != vals.Config.NRI.Socket {
			t.Errorf("nri_listen = %q, chart config nri.socket = %q", s.Crio.NRI.Listen, vals.Config.NRI.Socket)
		}
		v := s.Crio.NRI.DefaultValidator
		if v == nil || !v.Enable {
			t.Fatal("[crio.nri.default_validator] nri_enable_default_validator is not true")
		}
		if len(v.RequiredPlugins) != 0 {
			t.Errorf("nri_validator_required_plugins = %v: a global requirement stops every container on the node while lpu-nri is down", v.RequiredPlugins)
		}
		if v.TolerateMissingPluginsAnnotation != vals.NRI.TolerateMissingPluginsAnnotation {
			t.Errorf("nri_validator_tolerate_missing_plugins_annotation = %q, chart annotates its pod with %q",
				v.TolerateMissingPluginsAnnotation, vals.NRI.TolerateMissingPluginsAnnotation)
		}
		if v.RejectOCIHookAdjustment || v.RejectNamespaceAdjustment {
			t.Error("the snippet turns on unrelated validator rejections")
		}
	})
}

// containerdBinary finds a containerd 2.x to check the drop-in against:
// $CONTAINERD, else the e2e cache of test/e2e/tools.sh.
func containerdBinary(t *testing.T) string {
	t.Helper()
	if p := charttest.FirstExecutable(os.Getenv("CONTAINERD"), "/var/cache/lpu-e2e/containerd-v2.4.2/containerd"); p != "" {
		return p
	}
	t.Skip("no containerd binary ($CONTAINERD or test/e2e/tools.sh containerd)")
	return ""
}

// TestContainerdMergesDropIn lets a real containerd 2.x load a main config
// that imports containerd-2.x.toml and checks the merged result: our keys are
// in, the operator's own runtime and NRI settings survive, and containerd
// reports no unknown key.
func TestContainerdMergesDropIn(t *testing.T) {
	bin := containerdBinary(t)
	vals := loadChartValues(t)
	dir := t.TempDir()
	snippet, err := os.ReadFile("runtime/containerd-2.x.toml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "conf.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "conf.d", "lpu.toml"), snippet, 0o644); err != nil {
		t.Fatal(err)
	}
	mainCfg := `version = 3
root = "` + dir + `/root"
state = "` + dir + `/state"
imports = ["` + dir + `/conf.d/*.toml"]

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
    Root = "/run/operator-runc"

[plugins."io.containerd.nri.v1.nri"]
  plugin_request_timeout = "3s"
`
	mainPath := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(mainPath, []byte(mainCfg), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--config", mainPath, "config", "dump")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("containerd config dump: %v\n%s", err, stderr.String())
	}
	for _, bad := range []string{"Ignoring unknown key", "level=error"} {
		if strings.Contains(stderr.String(), bad) {
			t.Errorf("containerd: %q in\n%s", bad, stderr.String())
		}
	}
	var dump map[string]any
	if err := toml.Unmarshal(stdout.Bytes(), &dump); err != nil {
		t.Fatalf("parse config dump: %v", err)
	}
	cri, _ := digAny(dump, "plugins", "io.containerd.cri.v1.runtime").(map[string]any)
	nri, _ := digAny(dump, "plugins", "io.containerd.nri.v1.nri").(map[string]any)
	validator, _ := nri["default_validator"].(map[string]any)

	runcRoot := digAny(cri, "containerd", "runtimes", "runc", "options", "Root")
	checks := map[string]struct{ got, want any }{
		"cri cdi_spec_dirs has the spec dir": {slices.Contains(toStrings(cri["cdi_spec_dirs"]), vals.Config.CDI.SpecDir), true},
		"operator's runc Root kept":          {runcRoot, "/run/operator-runc"},
		"nri disable":                        {nri["disable"], false},
		"nri socket_path":                    {nri["socket_path"], vals.Config.NRI.Socket},
		"operator's nri request timeout":     {nri["plugin_request_timeout"], "3s"},
		"validator enable":                   {validator["enable"], true},
		"validator required_plugins":         {strings.Join(toStrings(validator["required_plugins"]), ","), ""},
		"validator toleration annotation":    {validator["tolerate_missing_plugins_annotation"], vals.NRI.TolerateMissingPluginsAnnotation},
	}
	for name, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", name, c.got, c.want)
		}
	}
}

func digAny(m map[string]any, keys ...string) any {
	var v any = m
	for _, k := range keys {
		mm, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = mm[k]
	}
	return v
}

func toStrings(v any) []string {
	list, _ := v.([]any)
	out := make([]string, 0, len(list))
	for _, x := range list {
		s, _ := x.(string)
		out = append(out, s)
	}
	return out
}

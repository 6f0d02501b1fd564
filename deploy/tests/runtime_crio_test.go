package tests_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pelletier/go-toml/v2"

	"github.com/hyperaccel/lpu-node/deploy/charttest"
)

// crioVersion is the CRI-O test/e2e/tools.sh crio installs (from the
// prebuilt binary in ../shared/tools; the module proxy serves no CRI-O).
const crioVersion = "1.36.3"

// crioBinary finds a CRI-O to check the drop-in against: $CRIO, else the
// e2e cache of test/e2e/tools.sh crio.
func crioBinary(t *testing.T) string {
	t.Helper()
	if p := charttest.FirstExecutable(os.Getenv("CRIO"), "/var/cache/lpu-e2e/crio-"+crioVersion+"/crio"); p != "" {
		return p
	}
	t.Skip("no CRI-O binary ($CRIO or test/e2e/tools.sh crio)")
	return ""
}

// crioDumpSetting matches a commented line of `crio config` that holds a
// setting: CRI-O comments out every value equal to its built-in default
// (and, in 1.36, the whole [crio.nri.default_validator] table whatever its
// values), but prints the value in effect.
var crioDumpSetting = regexp.MustCompile(`^([a-z0-9_]+ = |\[crio|\t"|\]$)`)

// uncommentCrioDump turns `crio config` output into the TOML of the
// settings in effect: commented settings are uncommented, prose is dropped.
func uncommentCrioDump(dump string) string {
	var b strings.Builder
	for _, line := range strings.Split(dump, "\n") {
		if rest, ok := strings.CutPrefix(line, "#"); ok {
			rest = strings.TrimPrefix(rest, " ")
			if !crioDumpSetting.MatchString(rest) {
				continue
			}
			line = rest
		}
		b.WriteString(line)
		b.WriteByte('\n')
	}
	return b.String()
}

// TestCrioMergesDropIn lets a real CRI-O load an operator's crio.conf with
// the shipped drop-in in its config dir (as docs/install.md installs it)
// and checks the configuration it reports: the drop-in's NRI, validator and
// CDI keys are in effect, and the operator's own settings survive.
func TestCrioMergesDropIn(t *testing.T) {
	bin := crioBinary(t)
	vals := loadChartValues(t)
	dir := t.TempDir()
	snippet, err := os.ReadFile("runtime/crio-nri-cdi.conf")
	if err != nil {
		t.Fatal(err)
	}
	confd := filepath.Join(dir, "crio.conf.d")
	if err := os.MkdirAll(confd, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(confd, "10-lpu.conf"), snippet, 0o644); err != nil {
		t.Fatal(err)
	}
	mainCfg := `[crio]
root = "` + dir + `/root"
runroot = "` + dir + `/run"

[crio.runtime]
default_runtime = "operator"

[crio.runtime.runtimes.operator]
runtime_path = "/usr/sbin/runc"
runtime_root = "/run/operator-runc"

[crio.nri]
nri_plugin_request_timeout = "3s"
`
	mainPath := filepath.Join(dir, "crio.conf")
	if err := os.WriteFile(mainPath, []byte(mainCfg), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--config", mainPath, "--config-dir", confd, "config")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("crio config: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "10-lpu.conf") {
		t.Errorf("crio did not read the drop-in:\n%s", stderr.String())
	}
	var dump map[string]any
	if err := toml.Unmarshal([]byte(uncommentCrioDump(stdout.String())), &dump); err != nil {
		t.Fatalf("parse crio config: %v", err)
	}
	runtime, _ := digAny(dump, "crio", "runtime").(map[string]any)
	nri, _ := digAny(dump, "crio", "nri").(map[string]any)
	validator, _ := nri["default_validator"].(map[string]any)
	checks := map[string]struct{ got, want any }{
		"cdi_spec_dirs has the spec dir":     {slices.Contains(toStrings(runtime["cdi_spec_dirs"]), vals.Config.CDI.SpecDir), true},
		"operator's default_runtime kept":    {runtime["default_runtime"], "operator"},
		"operator's runtime_root kept":       {digAny(runtime, "runtimes", "operator", "runtime_root"), "/run/operator-runc"},
		"enable_nri":                         {nri["enable_nri"], true},
		"nri_disable_connections":            {nri["nri_disable_connections"], false},
		"nri_listen":                         {nri["nri_listen"], vals.Config.NRI.Socket},
		"operator's nri request timeout":     {nri["nri_plugin_request_timeout"], "3s"},
		"validator enabled":                  {validator["nri_enable_default_validator"], true},
		"validator required_plugins":         {strings.Join(toStrings(validator["nri_validator_required_plugins"]), ","), ""},
		"validator toleration annotation":    {validator["nri_validator_tolerate_missing_plugins_annotation"], vals.NRI.TolerateMissingPluginsAnnotation},
		"validator namespace rejection left": {validator["nri_validator_reject_namespace_adjustment"], false},
	}
	for name, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", name, c.got, c.want)
		}
	}
}

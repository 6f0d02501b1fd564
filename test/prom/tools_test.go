package prom

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/hyperaccel/lpu-node/deploy/charttest"
)

const (
	// chartModes are the chart's values for mode.
	modeDevicePlugin = "devicePlugin"
	modeDRA          = "dra"
)

// repoRoot is the checkout this file is in.
func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("no caller information")
	}
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// tool finds a binary from env var, then fallback paths, then PATH; without
// one the test is skipped with one line naming where it looked.
func tool(t *testing.T, name, env, install string, fallback ...string) string {
	t.Helper()
	onPath, _ := exec.LookPath(name)
	if p := charttest.FirstExecutable(append(append([]string{os.Getenv(env)}, fallback...), onPath)...); p != "" {
		return p
	}
	t.Skipf("%s not found ($%s, %v, PATH): run `bash test/e2e/tools.sh %s`", name, env, fallback, install)
	return ""
}

// promtool is the distribution's promtool.
func promtool(t *testing.T) string {
	return tool(t, "promtool", "PROMTOOL", "prometheus", "/usr/bin/promtool")
}

// prometheus is the distribution's prometheus server.
func prometheus(t *testing.T) string {
	return tool(t, "prometheus", "PROMETHEUS", "prometheus", "/usr/bin/prometheus")
}

// helmTemplate renders one template of the chart with --set values, or
// the whole chart when template is "", as the deploy tests render it
// (charttest: release lpu-node in kube-system, Kubernetes 1.37.2).
func helmTemplate(t *testing.T, template string, sets ...string) []byte {
	t.Helper()
	if template != "" {
		sets = append([]string{"--show-only", template}, sets...)
	}
	return charttest.Render(t, charttest.Helm(t), sets...)
}

// renderedRules renders the chart's PrometheusRule for mode and returns its
// spec, a plain Prometheus rule file (groups:), as the operator's
// Prometheus loads it.
func renderedRules(t *testing.T, mode string) []byte {
	t.Helper()
	out := helmTemplate(t, "templates/prometheusrule.yaml", "metrics.prometheusRule.enabled=true", "mode="+mode)
	var rule struct {
		Kind string         `json:"kind"`
		Spec map[string]any `json:"spec"`
	}
	if err := yaml.Unmarshal(out, &rule); err != nil || rule.Kind != "PrometheusRule" {
		t.Fatalf("rendered PrometheusRule (mode %s): kind %q, %v\n%s", mode, rule.Kind, err, out)
	}
	spec, err := yaml.Marshal(rule.Spec)
	if err != nil {
		t.Fatal(err)
	}
	return spec
}

// writeFile writes content to dir/name and returns the path.
func writeFile(t *testing.T, dir, name string, content []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, content, 0o644); err != nil {
		t.Fatal(fmt.Errorf("write %s: %w", p, err))
	}
	return p
}

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

// daemons builds lpu-device-plugin, lpu-dra and lpu-nri from this checkout
// once per test binary and returns their directory.
func daemons(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "lpuprom-bin")
		if buildErr != nil {
			return
		}
		cmd := exec.Command("go", "build", "-o", buildDir+"/", "./cmd/lpu-device-plugin", "./cmd/lpu-dra", "./cmd/lpu-nri")
		cmd.Dir = repoRoot(t)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			buildErr = errors.Join(fmt.Errorf("go build the daemons: %w", err), errors.New(out.String()))
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildDir
}

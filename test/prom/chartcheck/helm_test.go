package chartcheck

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const (
	// chartDir is the chart, from this package's directory.
	chartDir = "../../../deploy/helm/lpu-node"
	// defaultHelm is where test/e2e/tools.sh helm caches its build.
	defaultHelm = "/var/cache/lpu-e2e/helm-v3.22.0/helm"
)

// helmBinary finds a real helm: $HELM, the tools.sh cache, then PATH. With
// none, the test fails under CI (env CI set) and is skipped elsewhere.
func helmBinary(t *testing.T) string {
	t.Helper()
	onPath, _ := exec.LookPath("helm")
	for _, p := range []string{os.Getenv("HELM"), defaultHelm, onPath} {
		if fi, err := os.Stat(p); p != "" && err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	msg := "helm not found ($HELM, " + defaultHelm + ", PATH): run `bash test/e2e/tools.sh helm`"
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// renderOnly renders one template of the chart with --set values, as
// deploy's tests render it (release lpu-node in kube-system, Kubernetes
// 1.37.2), helm kept away from the user's repositories and plugins.
func renderOnly(t *testing.T, helm, template string, sets ...string) []byte {
	t.Helper()
	args := []string{"template", "lpu-node", chartDir, "--namespace", "kube-system", "--kube-version", "1.37.2", "--show-only", template}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	cmd := exec.Command(helm, args...)
	home := t.TempDir()
	cmd.Env = append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return out
}

package tests_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hyperaccel/lpu-node/deploy/charttest"
	"github.com/hyperaccel/lpu-node/internal/clustertest"
)

// TestChartVersionFloors: below a feature's floor the chart refuses to
// render and names the value that turns the feature off (docs/install.md,
// "Versions"); at the floor, or with the value off, it renders.
func TestChartVersionFloors(t *testing.T) {
	helm := charttest.Helm(t)
	for name, tc := range map[string]struct {
		kube string
		sets []string
		want string // "" renders
	}{
		"runtime gate below 1.36":       {kube: "1.33", want: "set runtimeGate.enabled=false"},
		"runtime gate off on 1.33":      {kube: "1.33", sets: []string{"runtimeGate.enabled=false"}},
		"device plugin at 1.28":         {kube: "1.28.0", sets: []string{"runtimeGate.enabled=false"}},
		"below 1.28":                    {kube: "1.27.9", sets: []string{"runtimeGate.enabled=false"}, want: "needs Kubernetes >= 1.28"},
		"mode dra below 1.36":           {kube: "1.35.4", sets: []string{"mode=dra", "runtimeGate.enabled=false"}, want: "set mode=devicePlugin"},
		"mode dra and the gate at 1.36": {kube: "1.36.0", sets: []string{"mode=dra"}},
	} {
		t.Run(name, func(t *testing.T) {
			out, err := charttest.RunHelm(t, helm, charttest.TemplateArgs(append([]string{"--kube-version", tc.kube}, tc.sets...)...)...)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("helm template on %s: %v", tc.kube, err)
			case tc.want != "" && err == nil:
				t.Fatalf("helm template on %s rendered:\n%.300s", tc.kube, out)
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Fatalf("error does not say %q: %v", tc.want, err)
			}
		})
	}
}

// TestChartInstallWithoutGateAPI: on a real v1.37 API server with
// MutatingAdmissionPolicy turned off, helm install --dry-run=server refuses
// with the value to turn off instead of "no matches for kind", and installs
// with it off: the runtime gate's, and in mode dra the prefilter's. (A v1.37 API server with resource.k8s.io/v1 off does not
// become ready, so DRA's API check is left to its version floor above.)
func TestChartInstallWithoutGateAPI(t *testing.T) {
	helm := charttest.Helm(t)
	c := clustertest.Start(t, clustertest.Options{APIServerFlags: []string{
		"--runtime-config=admissionregistration.k8s.io/v1/mutatingadmissionpolicies=false",
		"--disable-admission-plugins=MutatingAdmissionPolicy"}}) // as a cluster with the API off runs
	install := func(sets ...string) ([]byte, error) {
		args := []string{"install", release, chartDir, "--namespace", namespace, "--dry-run=server", "--kubeconfig", c.Kubeconfig}
		for _, s := range sets {
			args = append(args, "--set", s)
		}
		return charttest.RunHelm(t, helm, args...)
	}
	// helm keeps its cache and config out of the user's home
	t.Setenv("HELM_CACHE_HOME", filepath.Join(t.TempDir(), "cache"))
	t.Setenv("HELM_CONFIG_HOME", filepath.Join(t.TempDir(), "config"))
	if _, err := os.Stat(c.Kubeconfig); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		sets []string
		want string // "" installs
	}{
		"gate on, its API off": {want: "set runtimeGate.enabled=false"},
		"gate off":             {sets: []string{"runtimeGate.enabled=false"}},
		// mode dra: the node-label prefilter is a MutatingAdmissionPolicy too.
		"dra prefilter on, its API off": {sets: []string{"mode=dra", "runtimeGate.enabled=false"}, want: "set dra.prefilter.enabled=false"},
		"dra prefilter off":             {sets: []string{"mode=dra", "runtimeGate.enabled=false", "dra.prefilter.enabled=false"}},
	} {
		t.Run(name, func(t *testing.T) {
			out, err := install(tc.sets...)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("helm install: %v", err)
			case tc.want != "" && err == nil:
				t.Fatalf("helm install succeeded:\n%.300s", out)
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Fatalf("error does not say %q: %v", tc.want, err)
			}
		})
	}
}

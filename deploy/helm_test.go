package deploy_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

const (
	chartDir      = "helm/lpu-node"
	manifestsFile = "manifests/lpu-node.yaml"
	// defaultHelm is where test/e2e/tools.sh helm caches its build.
	defaultHelm = "/var/cache/lpu-e2e/helm-v3.22.0/helm"
	release     = "lpu-node"
	namespace   = "kube-system"
)

// helmBinary finds a real helm: $HELM, the tools.sh cache, then PATH. With
// none, the test fails under CI (env CI set) and is skipped elsewhere.
func helmBinary(t *testing.T) string {
	t.Helper()
	onPath, _ := exec.LookPath("helm")
	if p := firstExecutable(os.Getenv("HELM"), defaultHelm, onPath); p != "" {
		return p
	}
	msg := "helm not found ($HELM, " + defaultHelm + ", PATH): run `bash test/e2e/tools.sh helm`"
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// firstExecutable returns the first of paths that is an executable file, or "".
func firstExecutable(paths ...string) string {
	for _, p := range paths {
		if fi, err := os.Stat(p); p != "" && err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}

// runHelm runs helm with args and returns stdout, or the error with stderr.
func runHelm(t *testing.T, helm string, args ...string) ([]byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, helm, args...)
	// Keep helm away from the user's repositories, cache and plugins.
	home := t.TempDir()
	cmd.Env = append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("helm %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.Bytes(), nil
}

// render runs `helm template` on the chart with the given --set values
// ("json:key=JSON" for --set-json).
func render(t *testing.T, helm string, sets ...string) []byte {
	t.Helper()
	out, err := runHelm(t, helm, templateArgs(sets...)...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// kubeVersion is the Kubernetes the chart is rendered for unless a test
// passes "--kube-version", V: the one every test here runs (the chart
// refuses what a cluster cannot serve, and helm template's own default
// predates it).
const kubeVersion = "1.37.2"

// templateArgs are helm template's arguments for sets: --set or
// --set-json each, but "--kube-version", V and "--show-only", T, which pass
// through, and "--with-tests", which renders the chart's helm test pod too
// (left out otherwise, as render.sh and release.sh leave it out).
func templateArgs(sets ...string) []string {
	args := []string{"template", release, chartDir, "--namespace", namespace}
	kube := kubeVersion
	tests := false
	for i := 0; i < len(sets); i++ {
		s := sets[i]
		if s == "--with-tests" {
			tests = true
			continue
		}
		if s == "--kube-version" && i+1 < len(sets) {
			kube = sets[i+1]
			i++
			continue
		}
		if s == "--show-only" && i+1 < len(sets) {
			args = append(args, s, sets[i+1])
			i++
			continue
		}
		if v, ok := strings.CutPrefix(s, "json:"); ok {
			args = append(args, "--set-json", v)
		} else {
			args = append(args, "--set", s)
		}
	}
	args = append(args, "--kube-version", kube)
	if !tests {
		args = append(args, "--skip-tests")
	}
	return args
}

// ServiceMonitor is the part of prometheus-operator's monitoring.coreos.com/v1
// ServiceMonitor the chart renders; strict decoding fails on anything else.
type ServiceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		JobLabel          string                        `json:"jobLabel"`
		NamespaceSelector struct{ MatchNames []string } `json:"namespaceSelector"`
		Selector          metav1.LabelSelector          `json:"selector"`
		Endpoints         []struct {
			Port          string `json:"port"`
			Path          string `json:"path"`
			Interval      string `json:"interval"`
			ScrapeTimeout string `json:"scrapeTimeout"`
			HonorLabels   bool   `json:"honorLabels"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// objects is one rendering, decoded strictly.
type objects struct {
	DaemonSet      *appsv1.DaemonSet
	ConfigMap      *corev1.ConfigMap
	ServiceAccount *corev1.ServiceAccount
	Service        *corev1.Service
	ServiceMonitor *ServiceMonitor
	NetworkPolicy  *networkingv1.NetworkPolicy
	// The runtime gate (cluster-scoped) and its parameters, a second
	// ConfigMap (listed in Kinds as PolicyParams).
	PolicyParams      *corev1.ConfigMap
	MutatingPolicy    *admissionv1.MutatingAdmissionPolicy
	MutatingBinding   *admissionv1.MutatingAdmissionPolicyBinding
	ValidatingPolicy  *admissionv1.ValidatingAdmissionPolicy
	ValidatingBinding *admissionv1.ValidatingAdmissionPolicyBinding
	Kinds             []string // in rendering order
}

var docSep = regexp.MustCompile(`(?m)^---\s*$`)

// decode splits a multi-document rendering and decodes each object strictly
// (unknown fields fail) into its k8s.io/api type. Unknown kinds and repeated
// kinds fail the test.
func decode(t *testing.T, rendered []byte) objects {
	t.Helper()
	var objs objects
	for i, doc := range docSep.Split(string(rendered), -1) {
		if strings.TrimSpace(stripComments(doc)) == "" {
			continue
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
			t.Fatalf("document %d: %v\n%s", i, err, doc)
		}
		gvk := tm.APIVersion + "/" + tm.Kind
		kind := tm.Kind
		var target any
		switch gvk {
		case "v1/ConfigMap":
			target = &objs.ConfigMap
			if isPolicyParams(doc) {
				target, kind = &objs.PolicyParams, "PolicyParams"
			}
		case "apps/v1/DaemonSet":
			target = &objs.DaemonSet
		case "v1/ServiceAccount":
			target = &objs.ServiceAccount
		case "v1/Service":
			target = &objs.Service
		case "monitoring.coreos.com/v1/ServiceMonitor":
			target = &objs.ServiceMonitor
		case "networking.k8s.io/v1/NetworkPolicy":
			target = &objs.NetworkPolicy
		case "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy":
			target = &objs.MutatingPolicy
		case "admissionregistration.k8s.io/v1/MutatingAdmissionPolicyBinding":
			target = &objs.MutatingBinding
		case "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy":
			target = &objs.ValidatingPolicy
		case "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicyBinding":
			target = &objs.ValidatingBinding
		default:
			t.Fatalf("document %d: unexpected kind %q\n%s", i, gvk, doc)
		}
		if slices.Contains(objs.Kinds, kind) {
			t.Fatalf("document %d: second %s", i, kind)
		}
		objs.Kinds = append(objs.Kinds, kind)
		if err := yaml.UnmarshalStrict([]byte(doc), target); err != nil {
			t.Fatalf("document %d (%s): strict decode: %v\n%s", i, gvk, err, doc)
		}
	}
	return objs
}

// isPolicyParams: doc is the admission policies' parameters
// (templates/policy-params.yaml), not the daemons' ConfigMap.
func isPolicyParams(doc string) bool {
	var m metav1.PartialObjectMetadata
	return yaml.Unmarshal([]byte(doc), &m) == nil && strings.HasSuffix(m.Name, "-policy-params")
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, line := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

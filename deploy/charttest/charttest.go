// Package charttest renders the lpu-node chart with a real helm binary for
// the deploy tests, splits a rendering into its documents and installs
// rendered admission policies in a real kube-apiserver, so that every test
// starts from the same rendering instead of its own copy of the preamble.
//
//	helm := charttest.Helm(t)
//	for _, d := range charttest.Split(t, charttest.Render(t, helm, "mode=dra")) {
//		if d.Kind == "DaemonSet" {
//			var ds appsv1.DaemonSet
//			charttest.Strict(t, d.Text, &ds)
//		}
//	}
//
// Helm is found in $HELM, the test/e2e/tools.sh cache, then PATH; without
// one a test fails under CI (env CI set) and is skipped elsewhere.
package charttest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"
)

const (
	// Release and Namespace are the release name and namespace every
	// rendering uses.
	Release   = "lpu-node"
	Namespace = "kube-system"
	// KubeVersion is the Kubernetes a chart is rendered for unless a test
	// passes "--kube-version", V: the one every test runs (the chart
	// refuses what a cluster cannot serve, and helm template's own default
	// predates it).
	KubeVersion = "1.37.2"
	// DefaultHelm is where test/e2e/tools.sh helm caches its build.
	DefaultHelm = "/var/cache/lpu-e2e/helm-v3.22.0/helm"
	// ParamsTemplate renders the ConfigMap the admission policies read
	// as params.
	ParamsTemplate = "templates/policy-params.yaml"
)

// Dir is the deploy directory (this package's parent), joined with elem.
func Dir(elem ...string) string {
	return filepath.Join(append([]string{deployDir()}, elem...)...)
}

// deployDir is found from this file's path, or, when -trimpath left a
// module path instead, from the working directory up.
func deployDir() string {
	_, file, _, _ := runtime.Caller(0)
	if d := filepath.Dir(filepath.Dir(file)); filepath.IsAbs(d) {
		return d
	}
	wd, _ := os.Getwd()
	for d := wd; filepath.Dir(d) != d; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "deploy", "helm", "lpu-node", "Chart.yaml")); err == nil {
			return filepath.Join(d, "deploy")
		}
	}
	return filepath.Dir(wd)
}

// ChartDir is the chart's directory.
func ChartDir() string { return Dir("helm", "lpu-node") }

// Helm finds a real helm: $HELM, the tools.sh cache, then PATH.
func Helm(t testing.TB) string {
	t.Helper()
	onPath, _ := exec.LookPath("helm")
	if p := FirstExecutable(os.Getenv("HELM"), DefaultHelm, onPath); p != "" {
		return p
	}
	msg := "helm not found ($HELM, " + DefaultHelm + ", PATH): run `bash test/e2e/tools.sh helm`"
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// FirstExecutable returns the first of paths that is an executable file, or "".
func FirstExecutable(paths ...string) string {
	for _, p := range paths {
		if fi, err := os.Stat(p); p != "" && err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}

// RunHelm runs helm with args and returns stdout, or the error with stderr.
func RunHelm(t testing.TB, helm string, args ...string) ([]byte, error) {
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

// Render runs `helm template` on the chart with the given --set values
// ("json:key=JSON" for --set-json; see TemplateArgs).
func Render(t testing.TB, helm string, sets ...string) []byte {
	t.Helper()
	out, err := RunHelm(t, helm, TemplateArgs(sets...)...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TemplateArgs are helm template's arguments for sets: --set or
// --set-json each, but "--kube-version", V and "--show-only", T, which pass
// through, and "--with-tests", which renders the chart's helm test pod too
// (left out otherwise, as render.sh and release.sh leave it out).
func TemplateArgs(sets ...string) []string {
	args := []string{"template", Release, ChartDir(), "--namespace", Namespace}
	kube := KubeVersion
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

// docSep separates the documents of a rendering.
var docSep = regexp.MustCompile(`(?m)^---\s*$`)

// Doc is one document of a rendering.
type Doc struct {
	APIVersion, Kind, Name, Namespace string
	// Source is the template it came from (helm's "# Source:" line).
	Source string
	// Text is the document as rendered, comments included.
	Text string
}

// Split returns the documents of a rendering that hold an object (not
// only comments), in order.
func Split(t testing.TB, rendered []byte) []Doc {
	t.Helper()
	var docs []Doc
	for i, text := range docSep.Split(string(rendered), -1) {
		if strings.TrimSpace(StripComments(text)) == "" {
			continue
		}
		var m metav1.PartialObjectMetadata
		if err := yaml.Unmarshal([]byte(text), &m); err != nil {
			t.Fatalf("document %d: %v\n%s", i, err, text)
		}
		d := Doc{APIVersion: m.APIVersion, Kind: m.Kind, Name: m.Name, Namespace: m.Namespace, Text: text}
		for _, line := range strings.Split(text, "\n") {
			if s, ok := strings.CutPrefix(line, "# Source: "); ok {
				d.Source = s
				break
			}
		}
		docs = append(docs, d)
	}
	return docs
}

// IsPolicyParams says whether d is the admission policies' parameters
// (templates/policy-params.yaml), not the daemons' ConfigMap.
func (d Doc) IsPolicyParams() bool {
	return d.Kind == "ConfigMap" && strings.HasSuffix(d.Name, "-policy-params")
}

// Strict decodes doc into into, failing the test on unknown fields.
func Strict(t testing.TB, doc string, into any) {
	t.Helper()
	if err := yaml.UnmarshalStrict([]byte(doc), into); err != nil {
		t.Fatalf("strict decode: %v\n%s", err, doc)
	}
}

// StripComments drops the comment lines of a document.
func StripComments(doc string) string {
	var b strings.Builder
	for _, line := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// InstallPolicies creates the rendered admission policies and bindings
// (and their parameters' ConfigMap, and RBAC objects: service accounts,
// cluster roles and their bindings) in a real API server and returns how
// many of each kind it created. Any other kind fails the test.
func InstallPolicies(ctx context.Context, t testing.TB, cs kubernetes.Interface, rendered []byte) map[string]int {
	t.Helper()
	kinds := map[string]int{}
	for _, d := range Split(t, rendered) {
		kinds[d.Kind]++
		var err error
		switch d.Kind {
		case "MutatingAdmissionPolicy":
			var o admissionv1.MutatingAdmissionPolicy
			Strict(t, d.Text, &o)
			_, err = cs.AdmissionregistrationV1().MutatingAdmissionPolicies().Create(ctx, &o, metav1.CreateOptions{})
		case "MutatingAdmissionPolicyBinding":
			var o admissionv1.MutatingAdmissionPolicyBinding
			Strict(t, d.Text, &o)
			_, err = cs.AdmissionregistrationV1().MutatingAdmissionPolicyBindings().Create(ctx, &o, metav1.CreateOptions{})
		case "ValidatingAdmissionPolicy":
			var o admissionv1.ValidatingAdmissionPolicy
			Strict(t, d.Text, &o)
			_, err = cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, &o, metav1.CreateOptions{})
		case "ValidatingAdmissionPolicyBinding":
			var o admissionv1.ValidatingAdmissionPolicyBinding
			Strict(t, d.Text, &o)
			_, err = cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, &o, metav1.CreateOptions{})
		case "ConfigMap": // the policies' parameters
			var o corev1.ConfigMap
			Strict(t, d.Text, &o)
			_, err = cs.CoreV1().ConfigMaps(o.Namespace).Create(ctx, &o, metav1.CreateOptions{})
		case "ServiceAccount":
			var o corev1.ServiceAccount
			Strict(t, d.Text, &o)
			_, err = cs.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, &o, metav1.CreateOptions{})
		case "ClusterRole":
			var o rbacv1.ClusterRole
			Strict(t, d.Text, &o)
			_, err = cs.RbacV1().ClusterRoles().Create(ctx, &o, metav1.CreateOptions{})
		case "ClusterRoleBinding":
			var o rbacv1.ClusterRoleBinding
			Strict(t, d.Text, &o)
			_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, &o, metav1.CreateOptions{})
		default:
			t.Fatalf("unexpected kind %s among the admission policies and RBAC objects", d.Kind)
		}
		if err != nil {
			t.Fatalf("create %s: %v", d.Kind, err)
		}
	}
	return kinds
}

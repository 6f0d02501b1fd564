package tests_test

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/hyperaccel/lpu-node/deploy/charttest"
)

// checkPod renders the chart's helm test pod with sets, and the claim
// template rendered beside it (nil when none).
func checkPod(t *testing.T, helm string, sets ...string) (*corev1.Pod, *resourcev1.ResourceClaimTemplate) {
	t.Helper()
	out := charttest.Render(t, helm, append([]string{"--with-tests", "--show-only", "templates/tests/check.yaml"}, sets...)...)
	var pod *corev1.Pod
	var tmpl *resourcev1.ResourceClaimTemplate
	for _, tm := range charttest.Split(t, out) {
		doc := tm.Text
		var v any
		switch tm.Kind {
		case "Pod":
			pod = &corev1.Pod{}
			v = pod
		case "ResourceClaimTemplate":
			tmpl = &resourcev1.ResourceClaimTemplate{}
			v = tmpl
		default:
			t.Fatalf("check renders a %s", tm.Kind)
		}
		if err := yaml.UnmarshalStrict([]byte(doc), v); err != nil {
			t.Fatalf("check %s: strict decode: %v\n%s", tm.Kind, err, doc)
		}
	}
	if pod == nil {
		t.Fatalf("no check pod rendered:\n%s", out)
	}
	return pod, tmpl
}

// TestChartCheckPod: `helm test` runs one pod in the release namespace
// that asks for check.lpus LPUs as a workload does (the device plugin's
// resource, or in mode dra a claim from a template of its own, rendered as
// a test hook in the release namespace before the pod, never a tenant
// namespace's template, whatever dra.claimTemplates.namespaces says) and
// runs lpu-nri check for that many; no DaemonSet's selector takes it; the
// manifests and every other rendering leave it out; values it cannot serve
// are refused naming them.
func TestChartCheckPod(t *testing.T) {
	helm := charttest.Helm(t)
	for name, tc := range map[string]struct {
		sets []string
		ns   string
		lpus string
	}{
		"devicePlugin":             {nil, namespace, "1"},
		"devicePlugin, 4":          {[]string{"check.lpus=4"}, namespace, "4"},
		"dra":                      {[]string{"mode=dra"}, namespace, "1"},
		"dra, 2, team ns":          {[]string{"mode=dra", "check.lpus=2", "json:dra.claimTemplates.namespaces=[\"team\",\"default\"]"}, namespace, "2"},
		"dra, no tenant templates": {[]string{"mode=dra", "json:dra.claimTemplates.namespaces=[]"}, namespace, "1"},
	} {
		t.Run(name, func(t *testing.T) {
			pod, tmpl := checkPod(t, helm, tc.sets...)
			if pod.Annotations["helm.sh/hook"] != "test" || !strings.Contains(pod.Annotations["helm.sh/hook-delete-policy"], "hook-succeeded") {
				t.Errorf("not a helm test hook removed on success: %v", pod.Annotations)
			}
			if pod.Namespace != tc.ns || pod.Spec.RestartPolicy != corev1.RestartPolicyNever {
				t.Errorf("namespace %q restartPolicy %q, want %q Never", pod.Namespace, pod.Spec.RestartPolicy, tc.ns)
			}
			c := pod.Spec.Containers[0]
			if want := []string{"/usr/bin/lpu-nri", "check", "--lpus", tc.lpus}; len(pod.Spec.Containers) != 1 || !slices.Equal(c.Command, want) {
				t.Errorf("command %q, want %q", c.Command, want)
			}
			if sc := c.SecurityContext; sc == nil || sc.Privileged != nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
				t.Errorf("the check container may escalate: %+v", sc)
			}
			if slices.Contains(tc.sets, "mode=dra") {
				rc := pod.Spec.ResourceClaims
				if tmpl == nil {
					t.Fatal("mode dra renders no claim template for the check pod")
				}
				if len(rc) != 1 || rc[0].ResourceClaimTemplateName == nil || *rc[0].ResourceClaimTemplateName != tmpl.Name ||
					len(c.Resources.Claims) != 1 || c.Resources.Claims[0].Name != rc[0].Name || len(c.Resources.Limits) != 0 {
					t.Fatalf("claims %+v, container claims %+v limits %v: want one claim from template %s", rc, c.Resources.Claims, c.Resources.Limits, tmpl.Name)
				}
				if tmpl.Namespace != namespace || tmpl.Name != pod.Name || tmpl.Annotations["helm.sh/hook"] != "test" ||
					tmpl.Annotations["helm.sh/hook-weight"] != "-1" || !strings.Contains(tmpl.Annotations["helm.sh/hook-delete-policy"], "hook-succeeded") {
					t.Errorf("claim template %s/%s %v: want the pod's own test hook in %s, created before it", tmpl.Namespace, tmpl.Name, tmpl.Annotations, namespace)
				}
				reqs := tmpl.Spec.Spec.Devices.Requests
				if len(reqs) != 1 || reqs[0].Exactly == nil || reqs[0].Exactly.DeviceClassName != "lpu-arc-"+tc.lpus+".hyperaccel.ai" || reqs[0].Exactly.Count > 1 {
					t.Errorf("claim template requests %+v, want one lpu-arc-%s.hyperaccel.ai device", reqs, tc.lpus)
				}
				o := decodeDRA(t, charttest.Render(t, helm, tc.sets...))
				for n, ds := range o.DaemonSets {
					selects(t, n, ds.Spec.Selector, pod)
				}
			} else {
				if tmpl != nil {
					t.Errorf("mode devicePlugin renders a claim template %s", tmpl.Name)
				}
				if q := c.Resources.Limits["hyperaccel.ai/lpu"]; q.String() != tc.lpus || len(pod.Spec.ResourceClaims) != 0 {
					t.Errorf("limits %v claims %v, want hyperaccel.ai/lpu: %s", c.Resources.Limits, pod.Spec.ResourceClaims, tc.lpus)
				}
				ds := decode(t, charttest.Render(t, helm, tc.sets...)).DaemonSet
				selects(t, ds.Name, ds.Spec.Selector, pod)
			}
		})
	}
	if out := charttest.Render(t, helm); strings.Contains(string(out), "lpu-nri\", \"check\"") {
		t.Error("a plain rendering (the manifests) carries the helm test pod")
	}
	for set, want := range map[string]string{
		"check.lpus=0": "lpus",
		"check.lpus=3": "check.lpus=3 is not one of dra.arcSizes",
	} {
		sets := []string{"--with-tests", set}
		if set == "check.lpus=3" {
			sets = append(sets, "mode=dra")
		}
		if _, err := charttest.RunHelm(t, helm, charttest.TemplateArgs(sets...)...); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("--set %s: %v, want an error saying %q", set, err, want)
		}
	}
	if out := charttest.Render(t, helm, "--with-tests", "check.enabled=false"); strings.Contains(string(out), "helm.sh/hook: test") {
		t.Error("check.enabled=false still renders the test pod")
	}
}

// selects fails when the DaemonSet's selector matches the check pod: the
// DaemonSet would count it as its own.
func selects(t *testing.T, name string, sel *metav1.LabelSelector, pod *corev1.Pod) {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		t.Fatal(err)
	}
	if s.Matches(labels.Set(pod.Labels)) {
		t.Errorf("DaemonSet %s's selector %v matches the check pod %v", name, s, pod.Labels)
	}
}

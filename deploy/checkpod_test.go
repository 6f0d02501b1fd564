package deploy_test

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

// checkPod renders the chart's helm test pod with sets.
func checkPod(t *testing.T, helm string, sets ...string) *corev1.Pod {
	t.Helper()
	out := render(t, helm, append([]string{"--with-tests", "--show-only", "templates/tests/check.yaml"}, sets...)...)
	var pod corev1.Pod
	if err := yaml.UnmarshalStrict(out, &pod); err != nil {
		t.Fatalf("check pod: strict decode: %v\n%s", err, out)
	}
	return &pod
}

// TestChartCheckPod: `helm test` runs one pod that asks for check.lpus
// LPUs as a workload does (the device plugin's resource, or in mode dra a
// claim from the chart's own lpu-arc-<n> template in that template's
// namespace) and runs lpu-nri check for that many; no DaemonSet's selector
// takes it; the manifests and every other rendering leave it out; values
// it cannot serve are refused naming them.
func TestChartCheckPod(t *testing.T) {
	helm := helmBinary(t)
	for name, tc := range map[string]struct {
		sets []string
		ns   string
		lpus string
	}{
		"devicePlugin":    {nil, namespace, "1"},
		"devicePlugin, 4": {[]string{"check.lpus=4"}, namespace, "4"},
		"dra":             {[]string{"mode=dra"}, "default", "1"},
		"dra, 2, team ns": {[]string{"mode=dra", "check.lpus=2", "json:dra.claimTemplates.namespaces=[\"team\",\"default\"]"}, "team", "2"},
	} {
		t.Run(name, func(t *testing.T) {
			pod := checkPod(t, helm, tc.sets...)
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
				if len(rc) != 1 || rc[0].ResourceClaimTemplateName == nil || *rc[0].ResourceClaimTemplateName != "lpu-arc-"+tc.lpus ||
					len(c.Resources.Claims) != 1 || c.Resources.Claims[0].Name != rc[0].Name || len(c.Resources.Limits) != 0 {
					t.Fatalf("claims %+v, container claims %+v limits %v: want one claim from lpu-arc-%s", rc, c.Resources.Claims, c.Resources.Limits, tc.lpus)
				}
				o := decodeDRA(t, render(t, helm, tc.sets...))
				if _, ok := o.ClaimTemplates[tc.ns+"/lpu-arc-"+tc.lpus]; !ok {
					t.Errorf("the chart renders no claim template %s/lpu-arc-%s for the check pod", tc.ns, tc.lpus)
				}
				for n, ds := range o.DaemonSets {
					selects(t, n, ds.Spec.Selector, pod)
				}
			} else {
				if q := c.Resources.Limits["hyperaccel.ai/lpu"]; q.String() != tc.lpus || len(pod.Spec.ResourceClaims) != 0 {
					t.Errorf("limits %v claims %v, want hyperaccel.ai/lpu: %s", c.Resources.Limits, pod.Spec.ResourceClaims, tc.lpus)
				}
				ds := decode(t, render(t, helm, tc.sets...)).DaemonSet
				selects(t, ds.Name, ds.Spec.Selector, pod)
			}
		})
	}
	if out := render(t, helm); strings.Contains(string(out), "lpu-nri\", \"check\"") {
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
		if _, err := runHelm(t, helm, templateArgs(sets...)...); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("--set %s: %v, want an error saying %q", set, err, want)
		}
	}
	if _, err := runHelm(t, helm, templateArgs("--with-tests", "mode=dra", "json:dra.claimTemplates.namespaces=[]")...); err == nil ||
		!strings.Contains(err.Error(), "check.enabled=false") {
		t.Errorf("mode dra without claim templates: %v, want an error naming check.enabled=false", err)
	}
	if out := render(t, helm, "--with-tests", "check.enabled=false"); strings.Contains(string(out), "helm.sh/hook: test") {
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

package tests_test

import (
	"fmt"
	"os"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// examplesValues is what the example pods must agree with in the chart's
// default values.
type examplesValues struct {
	Config struct {
		ResourceName string `json:"resourceName"`
	} `json:"config"`
	DRA struct {
		ArcSizes       []int `json:"arcSizes"`
		ClaimTemplates struct {
			Namespaces []string `json:"namespaces"`
		} `json:"claimTemplates"`
	} `json:"dra"`
}

// TestExamplePods: the pods docs/install.md links decode strictly as
// v1.37 Pods and ask for LPUs by names the chart's default values serve:
// the device plugin's resource, and one of the claim templates mode dra
// renders (lpu-arc-<k> for k in dra.arcSizes).
func TestExamplePods(t *testing.T) {
	var v examplesValues
	b, err := os.ReadFile(chartDir + "/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	var templates []string
	for _, k := range v.DRA.ArcSizes {
		templates = append(templates, fmt.Sprintf("lpu-arc-%d", k))
	}
	dp := readPod(t, chartDir+"/examples/pod-device-plugin.yaml")
	if q, ok := dp.Spec.Containers[0].Resources.Limits[corev1.ResourceName(v.Config.ResourceName)]; !ok || q.Value() < 1 {
		t.Errorf("pod-device-plugin.yaml asks no %s: %v", v.Config.ResourceName, dp.Spec.Containers[0].Resources.Limits)
	}
	dra := readPod(t, chartDir+"/examples/pod-dra.yaml")
	if len(dra.Spec.ResourceClaims) != 1 || dra.Spec.ResourceClaims[0].ResourceClaimTemplateName == nil ||
		!slices.Contains(templates, *dra.Spec.ResourceClaims[0].ResourceClaimTemplateName) {
		t.Errorf("pod-dra.yaml claims %+v, want one of the templates %v", dra.Spec.ResourceClaims, templates)
	}
	if ns := dra.Namespace; ns != "" && !slices.Contains(v.DRA.ClaimTemplates.Namespaces, ns) {
		t.Errorf("pod-dra.yaml runs in %s, where the chart renders no claim templates (%v)", ns, v.DRA.ClaimTemplates.Namespaces)
	}
	if len(dra.Spec.Containers) != 1 || len(dra.Spec.Containers[0].Resources.Claims) != 1 || dra.Spec.Containers[0].Resources.Claims[0].Name != dra.Spec.ResourceClaims[0].Name {
		t.Errorf("pod-dra.yaml's container does not use its claim: %+v", dra.Spec.Containers)
	}
}

// readPod decodes path strictly: a field the v1.37 Pod does not have fails.
func readPod(t *testing.T, path string) *corev1.Pod {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var p corev1.Pod
	if err := yaml.UnmarshalStrict(b, &p); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if p.APIVersion != "v1" || p.Kind != "Pod" || len(p.Spec.Containers) == 0 {
		t.Fatalf("%s: not a pod with containers: %s/%s", path, p.APIVersion, p.Kind)
	}
	return &p
}

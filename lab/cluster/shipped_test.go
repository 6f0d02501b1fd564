package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	sigsyaml "sigs.k8s.io/yaml"

	"github.com/hyperaccel/lpu-node/lab/churn"
)

func TestShippedManifest(t *testing.T) {
	s, err := loadShipped("../../deploy/manifests/lpu-node-dra.yaml", churn.MixDefault.Sizes)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.classes) == 0 {
		t.Fatal("no DeviceClass in the manifest")
	}
	if !slices.Equal(s.arcSizes, []int{1, 2, 4, 8}) {
		t.Errorf("published arc sizes %v, want the chart's [1 2 4 8]", s.arcSizes)
	}
	for name, want := range map[string]string{
		templateName(2, false): "deviceClassName: lpu-arc-2.hyperaccel.ai",
		templateName(8, true):  "deviceClassName: lpu-arc-8.hyperaccel.ai",
		templateName(1, true):  "deviceClassName: lpu-arc-1.hyperaccel.ai",
	} {
		tmpl := s.templates[name]
		if tmpl == nil {
			t.Fatalf("no template %s", name)
		}
		b, _ := sigsyaml.Marshal(tmpl.Spec)
		if !strings.Contains(string(b), want) {
			t.Errorf("%s lacks %q:\n%s", name, want, b)
		}
	}
	// The prefilter arms install the chart's policy and its binding only,
	// not the manifest's other policies (the runtime gate).
	if p := s.prefilter.policy; p == nil || p.Name != "lpu-node-dra-prefilter" || len(s.prefilter.bindings) != 1 || s.prefilter.bindings[0].Spec.PolicyName != p.Name {
		t.Errorf("prefilter policy %v with bindings %v, want lpu-node-dra-prefilter and its one binding", p, s.prefilter.bindings)
	}
	if cm := s.prefilter.params; cm == nil || cm.Name != "lpu-node-policy-params" || cm.Data["arcSizes"] != "1,2,4,8" {
		t.Errorf("prefilter parameters %v, want lpu-node-policy-params with the chart's arc sizes", cm)
	}
	if name := templateName(1, true); name != "lpu-arc-1" {
		t.Errorf("a best-effort 1-LPU pod uses %s, want the strict lpu-arc-1", name)
	}
	noConfig := filepath.Join(t.TempDir(), "classes.yaml")
	if err := os.WriteFile(noConfig, []byte("apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {name: x}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		noConfig: "no ConfigMap",
		"../../deploy/manifests/lpu-node-dra.yaml": "no ResourceClaimTemplate lpu-arc-3",
		"shipped_test.go":                          "parse shipped_test.go",
	} {
		if _, err := loadShipped(path, []int{3}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("loadShipped(%s, [3]) = %v, want %q", path, err, want)
		}
	}
}

func TestCountBound(t *testing.T) {
	// Two 8-LPU nodes: two 8-pods run at once, a third waits until one
	// ends at 1.5, then runs; a 2-pod arriving at 1.2 waits, then fits.
	jobs := []churn.Job{
		{Size: 8, Arrive: 0, End: 1.5},
		{Size: 8, Arrive: 0.1, End: 10},
		{Size: 8, Arrive: 1.0, End: 1.2},
		{Size: 2, Arrive: 1.2, End: 1.3},
		{Size: 1, Arrive: 1.4, End: 1.5},
	}
	if got := countBound(jobs, []int{8, 8}); got != 4 {
		t.Fatalf("count bound started %d multi-LPU pods, want 4", got)
	}
	// One node: the 8-pods queue behind each other; the third cannot
	// start before the horizon (2.4).
	if got := countBound(jobs, []int{8}); got != 2 {
		t.Fatalf("one node: %d, want 2", got)
	}
}

package main

import (
	"strings"
	"testing"

	sigsyaml "sigs.k8s.io/yaml"

	"github.com/hyperaccel/lpu-node/internal/churn"
)

func TestSizedTemplatesFromTheShippedManifest(t *testing.T) {
	s, err := loadShipped("../../deploy/manifests/lpu-node-dra.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(s.classes) == 0 {
		t.Fatal("no DeviceClass in the manifest")
	}
	ts, err := s.sizedTemplates([]int{1, 2, 8})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, tmpl := range ts {
		b, _ := sigsyaml.Marshal(tmpl.Spec)
		got[tmpl.Name] = string(b)
	}
	tests := map[string]struct{ want, not []string }{
		"lpu-arc-2":         {want: []string{"size == 2"}, not: []string{"size == 4", "firstAvailable"}},
		"lpu-8-best-effort": {want: []string{"size == 8", "size == 1", "count: 8", "firstAvailable"}, not: []string{"size == 4"}},
		"lpu-1-best-effort": {want: []string{"size == 1", "count: 1"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			spec, ok := got[name]
			if !ok {
				t.Fatalf("no template %s among %v", name, len(got))
			}
			for _, w := range tc.want {
				if !strings.Contains(spec, w) {
					t.Errorf("%s lacks %q:\n%s", name, w, spec)
				}
			}
			for _, w := range tc.not {
				if strings.Contains(spec, w) {
					t.Errorf("%s has %q:\n%s", name, w, spec)
				}
			}
		})
	}
	if _, err := loadShipped("shipped_test.go"); err == nil {
		t.Fatal("a file without the templates was accepted")
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

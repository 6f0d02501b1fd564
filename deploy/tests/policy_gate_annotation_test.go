package tests_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"
	validator "github.com/containerd/nri/plugins/default-validator"
	yamlv3 "go.yaml.in/yaml/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// msgForm is a substring of the refusal of a value the gate cannot read.
const msgForm = "must be a flow list of double-quoted plugin names"

// testGateAnnotationValues creates (dry run) an LPU pod in a namespace
// without the claim opt-in and a claim pod in one with it, each carrying a
// required-plugins value, and reads the value the policies leave with
// containerd's own NRI default validator (github.com/containerd/nri
// plugins/default-validator, the code containerd runs). Every value must be
// refused, naming the annotation, or left as a value containerd reads as a
// list that requires lpu: a value that starts a container while lpu is not
// connected is a bypass.
func testGateAnnotationValues(ctx context.Context, t *testing.T, cs kubernetes.Interface) {
	tests := map[string]struct {
		absent bool   // no annotation
		value  string // the annotation's value
		want   string // the value after admission; "" refused
	}{
		"absent":                         {absent: true, want: `["lpu"]`},
		"empty list":                     {value: `[]`, want: `["lpu"]`},
		"empty list with a space":        {value: `[ ]`, want: `["lpu"]`},
		"another plugin":                 {value: `["gpu"]`, want: `["gpu", "lpu"]`},
		"two other plugins, spaced":      {value: `[ "gpu" ,"x.y_z-1" ]`, want: `["gpu", "x.y_z-1", "lpu"]`},
		"already named":                  {value: `["gpu","lpu"]`, want: `["gpu","lpu"]`},
		"already named, spaced":          {value: `[ "lpu" ]`, want: `[ "lpu" ]`},
		"duplicates":                     {value: `["lpu", "lpu"]`, want: `["lpu", "lpu"]`},
		"other case":                     {value: `["LPU"]`, want: `["LPU", "lpu"]`},
		"a name containing lpu":          {value: `["lpu-other"]`, want: `["lpu-other", "lpu"]`},
		"empty string":                   {value: ``},
		"comment closing the list":       {value: `[] #]`},
		"comment naming lpu":             {value: `[] # "lpu"`},
		"named list, comment":            {value: `["lpu"] # gated`},
		"other plugin, comment":          {value: `["gpu"] # "lpu"`},
		"second document":                {value: "[]\n---\n[\"lpu\"]"},
		"document end":                   {value: "[]\n...\n[\"lpu\"]"},
		"block list":                     {value: "- gpu\n- other"},
		"block list naming lpu":          {value: "- \"lpu\""},
		"block list with a comment":      {value: "- gpu # \"lpu\""},
		"unquoted names":                 {value: `[gpu, lpu]`},
		"unquoted null":                  {value: `[null]`},
		"single-quoted name":             {value: `['lpu']`},
		"escaped name":                   {value: `["lp\u0075"]`},
		"empty name":                     {value: `[""]`},
		"name with a space":              {value: `["lpu "]`},
		"leading space":                  {value: ` ["lpu"]`},
		"trailing newline":               {value: "[\"lpu\"]\n"},
		"multi-line flow list":           {value: "[\"gpu\",\n \"lpu\"]"},
		"tab":                            {value: "[\t\"lpu\"]"},
		"bare scalar":                    {value: `"lpu"`},
		"mapping":                        {value: `{"lpu": 1}`},
		"tagged":                         {value: `!!seq ["lpu"]`},
		"anchored":                       {value: `&a ["lpu"]`},
		"two lists":                      {value: `[] ["lpu"]`},
		"unclosed":                       {value: `["gpu"`},
		"nested list":                    {value: `[["lpu"]]`},
		"flow mapping in the list":       {value: `[{"lpu": "x"}]`},
		"quote inside a plain name":      {value: `[a"lpu"]`},
		"comma inside a quoted name":     {value: `["a,b"]`},
		"unicode lookalike":              {value: "[\"lpu\u200b\"]"},
		"closing bracket inside a quote": {value: `["]"]`},
	}
	for i, name := range keys(tests) {
		tc := tests[name]
		t.Run(name, func(t *testing.T) {
			for _, p := range []*corev1.Pod{lpuPod(fmt.Sprintf("ann-%d", i), "gpu-team", nil), claimNamePod(fmt.Sprintf("ann-claim-%d", i), "tenant", "shared")} {
				if !tc.absent {
					withAnn(p, requiredPlugins, tc.value)
				}
				got, err := cs.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
				verdict := "refused"
				if err == nil {
					verdict = containerdVerdict(ctx, got.Annotations[requiredPlugins])
				}
				t.Logf("%-34q %-8s -> %s", tc.value, p.Namespace, verdict)
				switch {
				case tc.want == "":
					wantRefusal(t, err, msgForm)
				case err != nil:
					t.Errorf("%s/%s: %v, want %q", p.Namespace, p.Name, err, tc.want)
				case got.Annotations[requiredPlugins] != tc.want || !strings.HasPrefix(verdict, "gated"):
					t.Errorf("%s/%s: %q (%s), want %q gated", p.Namespace, p.Name, got.Annotations[requiredPlugins], verdict, tc.want)
				}
			}
		})
	}
}

// containerdVerdict says how containerd's default validator treats a pod
// whose required-plugins annotation is value: "gated (requires …)" when it
// requires lpu among exactly the listed plugins, "BYPASS" when a container
// starts without lpu, "NEVER STARTS" when the validator cannot parse it.
// The plugin set to try comes from the YAML library and call the validator
// uses (go.yaml.in/yaml/v3, Unmarshal into []string); the verdict comes
// from the validator itself.
func containerdVerdict(ctx context.Context, value string) string {
	var listed []string
	if err := yamlv3.Unmarshal([]byte(value), &listed); err != nil {
		if validate(ctx, value, []string{"lpu", "gpu", "other"}) == nil {
			return fmt.Sprintf("BYPASS: containerd starts it, YAML fails (%v)", err)
		}
		return "NEVER STARTS: containerd cannot parse it"
	}
	if err := validate(ctx, value, listed); err != nil {
		return fmt.Sprintf("MISMATCH: refused with %q connected: %v", listed, err)
	}
	without := slices.DeleteFunc(slices.Clone(listed), func(n string) bool { return n == "lpu" })
	if validate(ctx, value, without) == nil {
		return fmt.Sprintf("BYPASS: containerd requires %q, starts it without lpu", listed)
	}
	for _, name := range listed {
		// Every copy of the name goes: a duplicate still connected would
		// satisfy the validator.
		others := slices.DeleteFunc(slices.Clone(listed), func(n string) bool { return n == name })
		if validate(ctx, value, others) == nil {
			return fmt.Sprintf("MISMATCH: containerd does not require %q", name)
		}
	}
	return fmt.Sprintf("gated (containerd requires %q)", listed)
}

// validate runs containerd's NRI default validator (enabled, no global
// required plugins) on a container of a pod carrying the required-plugins
// value, with the named plugins connected.
func validate(ctx context.Context, value string, connected []string) error {
	req := &api.ValidateContainerAdjustmentRequest{
		Pod:       &api.PodSandbox{Name: "p", Namespace: "ns", Annotations: map[string]string{requiredPlugins: value}},
		Container: &api.Container{Name: "main"},
	}
	for i, n := range connected {
		req.Plugins = append(req.Plugins, &api.PluginInstance{Name: n, Index: fmt.Sprintf("%02d", 10+i)})
	}
	return validator.NewDefaultValidator(&validator.DefaultValidatorConfig{Enable: true}).ValidateContainerAdjustment(ctx, req)
}

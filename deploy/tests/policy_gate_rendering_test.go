package tests_test

import (
	"maps"
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hyperaccel/lpu-node/deploy/charttest"
)

// gatePolicies is the runtime gate and the dra-no-config policy of one
// rendering, by name.
type gatePolicies struct {
	Mutating   map[string]*admissionv1.MutatingAdmissionPolicy
	Validating map[string]*admissionv1.ValidatingAdmissionPolicy
	Bindings   []string // policy names the bindings bind
}

func decodeGate(t *testing.T, rendered []byte) gatePolicies {
	t.Helper()
	g := gatePolicies{Mutating: map[string]*admissionv1.MutatingAdmissionPolicy{}, Validating: map[string]*admissionv1.ValidatingAdmissionPolicy{}}
	for _, tm := range charttest.Split(t, rendered) {
		doc := tm.Text
		switch tm.Kind {
		case "MutatingAdmissionPolicy":
			var o admissionv1.MutatingAdmissionPolicy
			charttest.Strict(t, doc, &o)
			g.Mutating[o.Name] = &o
		case "ValidatingAdmissionPolicy":
			var o admissionv1.ValidatingAdmissionPolicy
			charttest.Strict(t, doc, &o)
			g.Validating[o.Name] = &o
		case "MutatingAdmissionPolicyBinding":
			var o admissionv1.MutatingAdmissionPolicyBinding
			charttest.Strict(t, doc, &o)
			g.Bindings = append(g.Bindings, o.Spec.PolicyName)
		case "ValidatingAdmissionPolicyBinding":
			var o admissionv1.ValidatingAdmissionPolicyBinding
			charttest.Strict(t, doc, &o)
			if !slices.Equal(o.Spec.ValidationActions, []admissionv1.ValidationAction{admissionv1.Deny}) {
				t.Errorf("binding %s: actions %v, want Deny", o.Name, o.Spec.ValidationActions)
			}
			g.Bindings = append(g.Bindings, o.Spec.PolicyName)
		}
	}
	return g
}

// TestRuntimeGateRendering: which policies each mode renders, every one
// bound, failing closed, matching updates; claim pods gated in every
// namespace by default.
func TestRuntimeGateRendering(t *testing.T) {
	helm := charttest.Helm(t)
	gate, claims := release+"-require-lpu-nri", release+"-require-lpu-nri-claims"
	vgate, vclaims, noConfig := release+"-runtime-gate", release+"-runtime-gate-claims", release+"-dra-no-config"
	lpuClaims, lpuTemplates := release+"-lpu-claims", release+"-lpu-templates" // LPU claims held to gated names
	nodeSlices := release + "-dra-node-slices"                                 // lpu-dra's own writes (TestDRASlicePolicy)
	// The node-label prefilter (TestDRANodeLabelPolicy, TestDRAPrefilterPolicy).
	nodeLabels, prefilter := release+"-dra-node-labels", release+"-dra-prefilter"

	plugin := decodeGate(t, charttest.Render(t, helm))
	if names(plugin.Mutating) != gate || names(plugin.Validating) != vgate {
		t.Fatalf("devicePlugin mode: %s / %s, want the pod gate only", names(plugin.Mutating), names(plugin.Validating))
	}
	dra := decodeGate(t, charttest.Render(t, helm, "mode=dra"))
	if names(dra.Mutating) != prefilter+","+gate+","+claims ||
		names(dra.Validating) != noConfig+","+nodeLabels+","+nodeSlices+","+lpuClaims+","+lpuTemplates+","+vgate+","+vclaims {
		t.Fatalf("dra mode: %s / %s", names(dra.Mutating), names(dra.Validating))
	}
	for _, name := range []string{gate, claims, vgate, vclaims, noConfig, nodeSlices, lpuClaims, lpuTemplates, nodeLabels, prefilter} {
		if !slices.Contains(dra.Bindings, name) {
			t.Errorf("%s has no binding (bindings: %v)", name, dra.Bindings)
		}
	}
	for name, m := range dra.Mutating {
		if name == prefilter {
			continue // a hint: Ignore, CREATE only (TestChartDRAPrefilter)
		}
		wantFailClosedUpdates(t, name, m.Spec.FailurePolicy, m.Spec.MatchConstraints)
	}
	for name, v := range dra.Validating {
		if name == nodeSlices || name == nodeLabels {
			if fp := v.Spec.FailurePolicy; fp == nil || *fp != admissionv1.Fail || len(v.Spec.MatchConstraints.ResourceRules) != 1 ||
				!slices.Equal(v.Spec.MatchConstraints.ResourceRules[0].Operations, []admissionv1.OperationType{admissionv1.Create, admissionv1.Update, admissionv1.Delete}) {
				t.Errorf("%s: failurePolicy %v, rules %+v; want Fail on create, update and delete", name, fp, v.Spec.MatchConstraints.ResourceRules)
			}
			continue
		}
		wantFailClosedUpdates(t, name, v.Spec.FailurePolicy, v.Spec.MatchConstraints)
	}
	optIn := map[string]string{"lpu.hyperaccel.ai/runtime-gate": "all-claims"}
	for _, sel := range []*metav1.LabelSelector{dra.Mutating[claims].Spec.MatchConstraints.NamespaceSelector, dra.Validating[vclaims].Spec.MatchConstraints.NamespaceSelector} {
		if sel == nil || !maps.Equal(sel.MatchLabels, optIn) || len(sel.MatchExpressions) != 0 {
			t.Errorf("default claim namespace selector %v, want the opt-in label %v", sel, optIn)
		}
	}
	// The selector goes to both claim policies, and only to them; {} is
	// every namespace, with no LPU claim policies left to need.
	narrow := decodeGate(t, charttest.Render(t, helm, "mode=dra", `json:runtimeGate.claimNamespaceSelector={"matchLabels":{"team":"ml"}}`))
	for _, sel := range []*metav1.LabelSelector{narrow.Mutating[claims].Spec.MatchConstraints.NamespaceSelector, narrow.Validating[vclaims].Spec.MatchConstraints.NamespaceSelector} {
		if sel == nil || !maps.Equal(sel.MatchLabels, map[string]string{"team": "ml"}) {
			t.Errorf("claim namespace selector %v, want team=ml alone (not merged with the default label)", sel)
		}
	}
	all := decodeGate(t, charttest.Render(t, helm, "mode=dra", `json:runtimeGate.claimNamespaceSelector={}`))
	if sel := all.Mutating[claims].Spec.MatchConstraints.NamespaceSelector; sel == nil || len(sel.MatchLabels) != 0 || len(sel.MatchExpressions) != 0 {
		t.Errorf("claimNamespaceSelector {}: %v, want every namespace", sel)
	}
	if _, ok := all.Validating[lpuClaims]; ok {
		t.Errorf("claimNamespaceSelector {}: %s rendered, but every claim pod is gated", lpuClaims)
	}
	if sel := narrow.Mutating[gate].Spec.MatchConstraints.NamespaceSelector; sel != nil && (len(sel.MatchLabels) != 0 || len(sel.MatchExpressions) != 0) {
		t.Errorf("the pod gate got the claim selector %v", sel)
	}
	if off := decodeGate(t, charttest.Render(t, helm, "mode=dra", "runtimeGate.enabled=false")); names(off.Mutating) != prefilter ||
		names(off.Validating) != noConfig+","+nodeLabels+","+nodeSlices {
		t.Errorf("runtimeGate off: %s / %s, want lpu-dra's own policies only (dra-no-config, dra-node-labels, dra-node-slices, dra-prefilter)",
			names(off.Mutating), names(off.Validating))
	}
}

func wantFailClosedUpdates(t *testing.T, name string, fp *admissionv1.FailurePolicyType, mc *admissionv1.MatchResources) {
	t.Helper()
	if fp == nil || *fp != admissionv1.Fail {
		t.Errorf("%s: failurePolicy %v, want Fail", name, fp)
	}
	if mc == nil || len(mc.ResourceRules) != 1 {
		t.Fatalf("%s: match %v", name, mc)
	}
	ops := mc.ResourceRules[0].Operations
	if !slices.Equal(ops, []admissionv1.OperationType{admissionv1.Create, admissionv1.Update}) {
		t.Errorf("%s: operations %v, want CREATE and UPDATE", name, ops)
	}
}

// TestRuntimeGateRejectsBadValues: the schema refuses malformed gate
// values, naming the key.
func TestRuntimeGateRejectsBadValues(t *testing.T) {
	helm := charttest.Helm(t)
	for name, tc := range map[string]struct{ set, want string }{
		"selector expressions":   {`json:runtimeGate.claimNamespaceSelector={"matchExpressions":[{"key":"a","operator":"Exists"}]}`, "matchExpressions"},
		"selector unknown field": {`json:runtimeGate.claimNamespaceSelector={"matchNames":["a"]}`, "matchNames"},
		"selector label value":   {`json:runtimeGate.claimNamespaceSelector={"matchLabels":{"a":1}}`, "matchLabels"},
		"resource name":          {`json:runtimeGate.lpuResources=["not a name"]`, "lpuResources"},
		"device class name":      {`json:runtimeGate.lpuDeviceClasses=["Not_A_Class"]`, "lpuDeviceClasses"},
	} {
		t.Run(name, func(t *testing.T) {
			out, err := charttest.RunHelm(t, helm, charttest.TemplateArgs("mode=dra", tc.set)...)
			if err == nil {
				t.Fatalf("helm template %s succeeded:\n%.400s", tc.set, out)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error does not name %q: %v", tc.want, err)
			}
		})
	}
}

// names are a map's keys, sorted and joined by commas.
func names[V any](m map[string]V) string { return strings.Join(keys(m), ",") }

// TestPoliciesStatic: the admission policies and their bindings are the
// same text whatever the values their CEL depends on (plugin and resource
// names, allowlisted namespaces, DeviceClasses, claim templates, arc sizes):
// those reach the CEL as params, from the policy-params ConfigMap that
// every such policy's binding names. Only dra-no-config needs none.
func TestPoliciesStatic(t *testing.T) {
	helm := charttest.Helm(t)
	policies := func(sets ...string) map[string]string {
		out := map[string]string{}
		for _, d := range charttest.Split(t, charttest.Render(t, helm, append([]string{"mode=dra"}, sets...)...)) {
			if strings.HasPrefix(d.APIVersion, "admissionregistration.k8s.io/") {
				out[d.Kind+"/"+d.Name] = d.Text
			}
		}
		return out
	}
	base := policies()
	other := policies("config.nri.pluginName=lpu2", "config.resourceName=example.com/lpu",
		"nri.tolerateMissingPluginsAnnotation=example.com/tolerate", "check.enabled=false",
		`json:runtimeGate.tolerateNamespaces=["ops"]`, `json:runtimeGate.lpuResources=["example.com/slice"]`,
		`json:runtimeGate.lpuDeviceClasses=["big.example.com"]`, `json:runtimeGate.lpuClaimTemplates=["mine"]`,
		"json:dra.arcSizes=[1,3]", `json:dra.claimTemplates.namespaces=["ml"]`)
	if len(base) != 20 || !slices.Equal(slices.Sorted(maps.Keys(base)), slices.Sorted(maps.Keys(other))) {
		t.Fatalf("policies and bindings %v, then %v: want the same 10 of each", slices.Sorted(maps.Keys(base)), slices.Sorted(maps.Keys(other)))
	}
	for key, doc := range base {
		if doc != other[key] {
			t.Errorf("%s depends on the values (first difference at byte %d):\n%s", key, firstDiff(doc, other[key]), other[key])
		}
	}
	params := release + "-policy-params"
	for key, doc := range base {
		kind, name, _ := strings.Cut(key, "/")
		var ref *admissionv1.ParamRef
		switch kind {
		case "ValidatingAdmissionPolicyBinding":
			var b admissionv1.ValidatingAdmissionPolicyBinding
			charttest.Strict(t, doc, &b)
			ref = b.Spec.ParamRef
		case "MutatingAdmissionPolicyBinding":
			var b admissionv1.MutatingAdmissionPolicyBinding
			charttest.Strict(t, doc, &b)
			ref = b.Spec.ParamRef
		default:
			continue
		}
		policy := base[strings.TrimSuffix(kind, "Binding")+"/"+name]
		if name == release+"-dra-no-config" {
			if ref != nil || strings.Contains(policy, "paramKind") {
				t.Errorf("%s: paramRef %+v, want no parameters", name, ref)
			}
			continue
		}
		want := admissionv1.DenyAction
		if name == release+"-dra-prefilter" {
			want = admissionv1.AllowAction // a hint: without parameters it changes nothing
		}
		if !strings.Contains(policy, "paramKind:\n    apiVersion: v1\n    kind: ConfigMap\n") || ref == nil || ref.Name != params ||
			ref.Namespace != namespace || ref.ParameterNotFoundAction == nil || *ref.ParameterNotFoundAction != want {
			t.Errorf("%s: paramRef %+v, want %s/%s, %s when missing; the policy must declare paramKind ConfigMap", name, ref, namespace, params, want)
		}
	}
}

package tests_test

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/hyperaccel/lpu-node/config"
	"github.com/hyperaccel/lpu-node/deploy/charttest"
	"github.com/hyperaccel/lpu-node/internal/clustertest"
	"github.com/hyperaccel/lpu-node/pkg/arcslice"
)

const (
	prefilterPolicy  = release + "-dra-prefilter"
	nodeLabelsPolicy = release + "-dra-node-labels"
)

// TestChartDRAPrefilter: dra.prefilter.enabled (default true) renders the
// prefilter MutatingAdmissionPolicy and the node-label policy with their
// bindings, gives lpu-dra's ClusterRole nodes list/watch/patch and writes
// dra.nodeLabels into every node config lpu-dra may read; false renders
// neither policy, leaves nodes get only and writes nodeLabels: false. The
// MAP's names follow dra.arcSizes; without claim-template namespaces it
// has nothing to match and is not rendered.
func TestChartDRAPrefilter(t *testing.T) {
	helm := charttest.Helm(t)
	named := `json:nodeConfigs.configs={"ring4":{"allocation":{"policy":"strict"}}}`
	for name, tc := range map[string]struct {
		sets []string
		on   bool
	}{
		"mode dra":                            {sets: []string{"mode=dra", named}, on: true},
		"mode dra, prefilter off":             {sets: []string{"mode=dra", named, "dra.prefilter.enabled=false"}},
		"dra nodes of a devicePlugin release": {sets: []string{"nodeModes.enabled=true", named}, on: true},
		"dra nodes, prefilter off":            {sets: []string{"nodeModes.enabled=true", named, "dra.prefilter.enabled=false"}},
	} {
		t.Run(name, func(t *testing.T) {
			r := decodePrefilter(t, charttest.Render(t, helm, tc.sets...))
			if _, ok := r.Mutating[prefilterPolicy]; ok != tc.on {
				t.Errorf("MAP %s rendered %v, want %v", prefilterPolicy, ok, tc.on)
			}
			if _, ok := r.Validating[nodeLabelsPolicy]; ok != tc.on {
				t.Errorf("VAP %s rendered %v, want %v", nodeLabelsPolicy, ok, tc.on)
			}
			for _, b := range []string{prefilterPolicy, nodeLabelsPolicy} {
				if slices.Contains(r.Bindings, b) != tc.on {
					t.Errorf("binding %s rendered %v, want %v", b, !tc.on, tc.on)
				}
			}
			want := []string{"get", "list", "watch"} // the cordoned-LPU annotation
			if tc.on {
				want = []string{"get", "list", "watch", "patch"}
			}
			if got := nodeVerbs(t, r.Role); !slices.Equal(got, want) {
				t.Errorf("lpu-dra's verbs on nodes %v, want %v", got, want)
			}
			if r.ConfigMap == nil || len(r.ConfigMap.Data) != 2 {
				t.Fatalf("ConfigMap %+v, want config.yaml and config-ring4.yaml", r.ConfigMap)
			}
			for _, file := range slices.Sorted(maps.Keys(r.ConfigMap.Data)) {
				cfg, err := config.Parse([]byte(r.ConfigMap.Data[file]))
				if err != nil {
					t.Fatalf("%s: %v", file, err)
				}
				if cfg.DRA.NodeLabels == nil || *cfg.DRA.NodeLabels != tc.on {
					t.Errorf("%s: dra.nodeLabels %v, want %v written out", file, cfg.DRA.NodeLabels, tc.on)
				}
			}
		})
	}

	// The MAP matches exactly the chart's names for the offered sizes: its
	// conditions read them from the parameters.
	for sizes, tc := range map[string]struct{ has, lacks []string }{
		"[1,4]": {has: []string{"lpu-arc-1", "lpu-arc-4", "lpu-4-best-effort", "hyperaccel.ai/lpu-arc-4",
			"deviceclass.resource.kubernetes.io/lpu-arc-4.hyperaccel.ai"}, lacks: []string{"lpu-arc-2", "lpu-1-best-effort", "lpu-8-best-effort"}},
		"[1,3,16]": {has: []string{"lpu-3-best-effort", "lpu-arc-16", "hyperaccel.ai/lpu-arc-16"}, lacks: []string{"lpu-arc-4"}},
	} {
		r := decodePrefilter(t, charttest.Render(t, helm, "mode=dra", "json:dra.arcSizes="+sizes, `json:dra.claimTemplates.namespaces=["ml","research"]`))
		p := r.Mutating[prefilterPolicy]
		if p == nil || len(p.Spec.MatchConditions) != 2 || r.Params == nil {
			t.Fatalf("arcSizes %s: MAP %+v, parameters %+v", sizes, p, r.Params)
		}
		if got := r.Params.Data["claimTemplateNamespaces"]; got != "ml,research" {
			t.Errorf("arcSizes %s: claimTemplateNamespaces %q, want ml,research", sizes, got)
		}
		if got := p.Spec.MatchConditions[0].Expression; got != `request.namespace in params.data.claimTemplateNamespaces.split(",")` {
			t.Errorf("arcSizes %s: namespace condition %q", sizes, got)
		}
		if asks := p.Spec.MatchConditions[1].Expression; !strings.Contains(asks, "params.data.arcResources") || !strings.Contains(asks, "params.data.arcClaimTemplates") {
			t.Errorf("arcSizes %s: asks-arc does not read the arcs' names from the parameters: %s", sizes, asks)
		}
		names := strings.Split(r.Params.Data["arcResources"]+","+r.Params.Data["arcClaimTemplates"], ",")
		for _, s := range tc.has {
			if !slices.Contains(names, s) {
				t.Errorf("arcSizes %s: asks-arc lacks %s: %v", sizes, s, names)
			}
		}
		for _, s := range tc.lacks {
			if slices.Contains(names, s) {
				t.Errorf("arcSizes %s: asks-arc names %s: %v", sizes, s, names)
			}
		}
		if p.Spec.FailurePolicy == nil || *p.Spec.FailurePolicy != admissionv1.Ignore || len(p.Spec.MatchConstraints.ResourceRules) != 1 ||
			!slices.Equal(p.Spec.MatchConstraints.ResourceRules[0].Operations, []admissionv1.OperationType{admissionv1.Create}) {
			t.Errorf("arcSizes %s: failurePolicy %v, rules %+v: want Ignore (a hint), pods CREATE only", sizes, p.Spec.FailurePolicy, p.Spec.MatchConstraints.ResourceRules)
		}
	}
	r := decodePrefilter(t, charttest.Render(t, helm, "mode=dra", "json:dra.claimTemplates.namespaces=[]", "check.enabled=false"))
	if _, ok := r.Mutating[prefilterPolicy]; ok {
		t.Error("no claim-template namespaces: the prefilter MAP still rendered")
	}
	if _, ok := r.Validating[nodeLabelsPolicy]; !ok {
		t.Error("no claim-template namespaces: lpu-dra still labels its Node, the node-label policy must stay")
	}
	if out := string(charttest.Render(t, helm)); strings.Contains(out, "prefilter") || strings.Contains(out, "node-labels") {
		t.Error("mode devicePlugin renders prefilter objects")
	}
}

// prefilterClusterOptions: a scheduler, and Node objects without a kubelet
// that are not tainted not-ready.
var prefilterClusterOptions = clustertest.Options{Scheduler: true,
	APIServerFlags: []string{"--disable-admission-plugins=TaintNodesByCondition"}}

// arcExpr is the expression the prefilter adds for a size k on key.
func arcExpr(key string, k int) corev1.NodeSelectorRequirement {
	e := corev1.NodeSelectorRequirement{Key: key, Operator: corev1.NodeSelectorOpNotIn}
	for i := range k {
		e.Values = append(e.Values, strconv.Itoa(i))
	}
	return e
}

func strictExpr(k int) corev1.NodeSelectorRequirement {
	return arcExpr(arcslice.LabelLargestFreeArc, k)
}
func freeExpr(k int) corev1.NodeSelectorRequirement { return arcExpr(arcslice.LabelFreeLPUs, k) }

// requiredTerms is a pod's required node selector terms, nil without.
func requiredTerms(p *corev1.Pod) []corev1.NodeSelectorTerm {
	if p.Spec.Affinity == nil || p.Spec.Affinity.NodeAffinity == nil || p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return nil
	}
	return p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
}

// withTerms gives p a required node affinity of these terms.
func withTerms(p *corev1.Pod, terms ...corev1.NodeSelectorTerm) *corev1.Pod {
	if p.Spec.Affinity == nil {
		p.Spec.Affinity = &corev1.Affinity{}
	}
	if p.Spec.Affinity.NodeAffinity == nil {
		p.Spec.Affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{NodeSelectorTerms: terms}
	return p
}

func term(exprs ...corev1.NodeSelectorRequirement) corev1.NodeSelectorTerm {
	return corev1.NodeSelectorTerm{MatchExpressions: exprs}
}

// multiPod asks for several things at once: claims from templates and
// extended resources.
func multiPod(name, ns string, templates []string, res ...string) *corev1.Pod {
	p := plainPod(name, ns, nil)
	for i, tmpl := range templates {
		claim := fmt.Sprintf("c%d", i)
		p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, corev1.PodResourceClaim{Name: claim, ResourceClaimTemplateName: &tmpl})
		p.Spec.Containers[0].Resources.Claims = append(p.Spec.Containers[0].Resources.Claims, corev1.ResourceClaim{Name: claim})
	}
	if len(res) > 0 {
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{}
		for _, r := range res {
			p.Spec.Containers[0].Resources.Limits[corev1.ResourceName(r)] = resource.MustParse("1")
		}
	}
	return p
}

// TestDRAPrefilterPolicy installs the chart's prefilter
// MutatingAdmissionPolicy (claim templates in "ml" and "default") in a real
// kube-apiserver v1.37.2 with a kube-scheduler: pods created there that ask
// for an arc by a chart name get exactly the required node affinity of
// their largest strict and best-effort sizes, in every term of their own,
// once; other pods, pods elsewhere and updates are left alone; and the
// scheduler keeps a pod off nodes whose labels say no room (a pod whose
// own affinity conflicts stays Pending, Unschedulable) and places it on a
// labelled node with room or an unlabelled one.
func TestDRAPrefilterPolicy(t *testing.T) {
	helm := charttest.Helm(t)
	c := clustertest.Start(t, prefilterClusterOptions)
	cs := kubernetes.NewForConfigOrDie(c.Config)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	makeNamespaces(ctx, t, cs, map[string]map[string]string{"ml": nil, "default": nil, "other": nil})

	// A pod created before the policy, to be updated under it.
	early, err := cs.CoreV1().Pods("ml").Create(ctx, claimTemplatePod("early", "ml", "lpu-arc-4"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sets := []string{"mode=dra", `json:dra.claimTemplates.namespaces=["ml","default"]`}
	rendered := charttest.Render(t, helm, append([]string{"--show-only", "templates/dra-prefilter.yaml", "--show-only", charttest.ParamsTemplate}, sets...)...)
	if kinds := charttest.InstallPolicies(ctx, t, cs, rendered); len(kinds) != 3 || kinds["MutatingAdmissionPolicy"] != 1 || kinds["MutatingAdmissionPolicyBinding"] != 1 || kinds["ConfigMap"] != 1 {
		t.Fatalf("rendered kinds %v, want the prefilter MAP, its binding and parameters", kinds)
	}
	waitForPrefilter(ctx, t, cs, "lpu-arc-4", []corev1.NodeSelectorTerm{term(strictExpr(4))})

	t.Run("create", func(t *testing.T) { testPrefilterCreate(ctx, t, cs) })
	t.Run("update", func(t *testing.T) {
		got, err := updatePod(ctx, cs, "ml", early.Name, func(p *corev1.Pod) { metav1.SetMetaDataLabel(&p.ObjectMeta, "touched", "yes") })
		if err != nil {
			t.Fatal(err)
		}
		if terms := requiredTerms(got); terms != nil {
			t.Errorf("an UPDATE got a node affinity: %+v", terms)
		}
	})
	t.Run("scheduling", func(t *testing.T) { testPrefilterScheduling(ctx, t, cs) })

	// Other sizes offered: the names and the NotIn lists follow dra.arcSizes,
	// through the parameters alone (the policy's text does not depend on
	// the values).
	other := []string{"mode=dra", "json:dra.arcSizes=[1,3,16]", `json:dra.claimTemplates.namespaces=["ml"]`}
	policy := func(sets []string) []byte {
		return charttest.Render(t, helm, append([]string{"--show-only", "templates/dra-prefilter.yaml"}, sets...)...)
	}
	if a, b := policy(sets), policy(other); !bytes.Equal(a, b) {
		t.Errorf("the prefilter policy's text depends on dra.arcSizes or dra.claimTemplates.namespaces (first difference at byte %d)", firstDiff(string(a), string(b)))
	}
	updateParams(ctx, t, cs, charttest.Render(t, helm, append([]string{"--show-only", charttest.ParamsTemplate}, other...)...))
	waitForPrefilter(ctx, t, cs, "lpu-arc-16", []corev1.NodeSelectorTerm{term(strictExpr(16))})
	t.Run("other sizes", func(t *testing.T) {
		for name, tc := range map[string]struct {
			pod  *corev1.Pod
			want []corev1.NodeSelectorTerm
		}{
			"lpu-3-best-effort":              {pod: claimTemplatePod("be3", "ml", "lpu-3-best-effort"), want: []corev1.NodeSelectorTerm{term(freeExpr(3))}},
			"hyperaccel.ai/lpu-arc-16":       {pod: resourcePod("r16", "ml", "hyperaccel.ai/lpu-arc-16"), want: []corev1.NodeSelectorTerm{term(strictExpr(16))}},
			"lpu-arc-4 is not offered":       {pod: claimTemplatePod("a4", "ml", "lpu-arc-4")},
			"hyperaccel.ai/lpu-arc-8 is not": {pod: resourcePod("r8", "ml", "hyperaccel.ai/lpu-arc-8")},
		} {
			t.Run(name, func(t *testing.T) { wantTerms(t, dryCreate(ctx, t, cs, tc.pod), tc.want) })
		}
	})
}

// waitForPrefilter waits until a pod asking template gets want.
func waitForPrefilter(ctx context.Context, t *testing.T, cs kubernetes.Interface, template string, want []corev1.NodeSelectorTerm) {
	t.Helper()
	eventuallyPolicy(ctx, t, func() error {
		p, err := cs.CoreV1().Pods("ml").Create(ctx, claimTemplatePod("probe", "ml", template), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return err
		}
		if got := requiredTerms(p); !equality.Semantic.DeepEqual(got, want) {
			return fmt.Errorf("probe pod's terms %+v, want %+v", got, want)
		}
		return nil
	})
}

func dryCreate(ctx context.Context, t *testing.T, cs kubernetes.Interface, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	got, err := cs.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		t.Fatalf("create %s/%s: %v", p.Namespace, p.Name, err)
	}
	return got
}

func wantTerms(t *testing.T, p *corev1.Pod, want []corev1.NodeSelectorTerm) {
	t.Helper()
	if got := requiredTerms(p); !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("required node selector terms\n got %s\nwant %s", toYAML(got), toYAML(want))
	}
}

func toYAML(v any) string {
	b, err := yaml.Marshal(v)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// testPrefilterCreate: each kind of ask gets exactly its expressions.
func testPrefilterCreate(ctx context.Context, t *testing.T, cs kubernetes.Interface) {
	hostIn := corev1.NodeSelectorRequirement{Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: []string{"a", "b"}}
	zoneIn := corev1.NodeSelectorRequirement{Key: "topology.kubernetes.io/zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"z1"}}
	field := corev1.NodeSelectorRequirement{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}
	ownArc := corev1.NodeSelectorRequirement{Key: arcslice.LabelLargestFreeArc, Operator: corev1.NodeSelectorOpIn, Values: []string{"0"}}
	preferred := []corev1.PreferredSchedulingTerm{{Weight: 5, Preference: term(zoneIn)}}
	podAnti := &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
		TopologyKey: "kubernetes.io/hostname", LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}}}}}
	initPod := plainPod("init", "ml", nil)
	initPod.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "busybox", Resources: corev1.ResourceRequirements{
		Requests: corev1.ResourceList{"deviceclass.resource.kubernetes.io/lpu-arc-8.hyperaccel.ai": resource.MustParse("1")},
		Limits:   corev1.ResourceList{"deviceclass.resource.kubernetes.io/lpu-arc-8.hyperaccel.ai": resource.MustParse("1")}}}}
	prefOnly := claimTemplatePod("prefonly", "ml", "lpu-arc-2")
	prefOnly.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: preferred}, PodAntiAffinity: podAnti}
	antiOnly := claimTemplatePod("antionly", "ml", "lpu-arc-2")
	antiOnly.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: podAnti}
	fields := withTerms(claimTemplatePod("fields", "ml", "lpu-arc-4"), corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{field}})

	tests := map[string]struct {
		pod  *corev1.Pod
		want []corev1.NodeSelectorTerm // nil: no required node affinity
	}{
		"strict template":                   {pod: claimTemplatePod("s4", "ml", "lpu-arc-4"), want: []corev1.NodeSelectorTerm{term(strictExpr(4))}},
		"strict template of size 1":         {pod: claimTemplatePod("s1", "default", "lpu-arc-1"), want: []corev1.NodeSelectorTerm{term(strictExpr(1))}},
		"best-effort template":              {pod: claimTemplatePod("b4", "ml", "lpu-4-best-effort"), want: []corev1.NodeSelectorTerm{term(freeExpr(4))}},
		"arc extended resource":             {pod: resourcePod("r2", "ml", "hyperaccel.ai/lpu-arc-2"), want: []corev1.NodeSelectorTerm{term(strictExpr(2))}},
		"class's implicit resource in init": {pod: initPod, want: []corev1.NodeSelectorTerm{term(strictExpr(8))}},
		"largest of each kind": {pod: multiPod("mix", "ml", []string{"lpu-arc-2", "lpu-8-best-effort", "lpu-2-best-effort"}, "hyperaccel.ai/lpu-arc-4"),
			want: []corev1.NodeSelectorTerm{term(strictExpr(4), freeExpr(8))}},
		"every term of its own": {pod: withTerms(claimTemplatePod("two", "ml", "lpu-arc-8"), term(hostIn), term(zoneIn)),
			want: []corev1.NodeSelectorTerm{term(hostIn, strictExpr(8)), term(zoneIn, strictExpr(8))}},
		"a term of fields only keeps them": {pod: fields,
			want: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{field}, MatchExpressions: []corev1.NodeSelectorRequirement{strictExpr(4)}}}},
		"its own expression on our key is kept, ours added": {pod: withTerms(claimTemplatePod("own", "ml", "lpu-arc-4"), term(ownArc)),
			want: []corev1.NodeSelectorTerm{term(ownArc, strictExpr(4))}},
		"a term that has ours gets nothing twice": {pod: withTerms(claimTemplatePod("again", "ml", "lpu-arc-4"), term(strictExpr(4)), term(hostIn)),
			want: []corev1.NodeSelectorTerm{term(strictExpr(4)), term(hostIn, strictExpr(4))}},
		"preferred and pod anti-affinity kept": {pod: prefOnly, want: []corev1.NodeSelectorTerm{term(strictExpr(2))}},
		"pod anti-affinity only":               {pod: antiOnly, want: []corev1.NodeSelectorTerm{term(strictExpr(2))}},
		"no LPU":                               {pod: plainPod("plain", "ml", nil)},
		"device-plugin LPUs":                   {pod: lpuPod("dp", "ml", nil)},
		"another namespace":                    {pod: claimTemplatePod("elsewhere", "other", "lpu-arc-4")},
		"another vendor's template":            {pod: claimTemplatePod("gpu", "ml", "gpu-claim")},
		"a pre-made claim":                     {pod: claimNamePod("named", "ml", "lpu-arc-4")},
		"a size not offered":                   {pod: claimTemplatePod("s3", "ml", "lpu-arc-3")},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			sent := tc.pod.DeepCopy()
			got := dryCreate(ctx, t, cs, tc.pod)
			wantTerms(t, got, tc.want)
			// Nothing else of the affinity changes.
			if sent.Spec.Affinity != nil {
				if !equality.Semantic.DeepEqual(got.Spec.Affinity.PodAntiAffinity, sent.Spec.Affinity.PodAntiAffinity) ||
					!equality.Semantic.DeepEqual(got.Spec.Affinity.PodAffinity, sent.Spec.Affinity.PodAffinity) ||
					(sent.Spec.Affinity.NodeAffinity != nil && !equality.Semantic.DeepEqual(got.Spec.Affinity.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution,
						sent.Spec.Affinity.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution)) {
					t.Errorf("affinity changed beyond the required terms:\n sent %s\n got %s", toYAML(sent.Spec.Affinity), toYAML(got.Spec.Affinity))
				}
			}
		})
	}
}

// testPrefilterScheduling: pods carrying the affinities the MAP gives
// (plain pods in a namespace it does not watch, so no DRA is involved)
// meet the real scheduler.
func testPrefilterScheduling(ctx context.Context, t *testing.T, cs kubernetes.Interface) {
	for name, labels := range map[string]map[string]string{
		"full":       {arcslice.LabelLargestFreeArc: "0", arcslice.LabelFreeLPUs: "0"},
		"roomy":      {arcslice.LabelLargestFreeArc: "8", arcslice.LabelFreeLPUs: "8"},
		"fragmented": {arcslice.LabelLargestFreeArc: "2", arcslice.LabelFreeLPUs: "4"},
		"unlabelled": nil,
	} {
		readyNode(ctx, t, cs, name, labels)
	}
	// What the MAP gives: an arc-4 pod, and one whose own affinity wants a
	// node with no free arc.
	arc4 := requiredTerms(dryCreate(ctx, t, cs, claimTemplatePod("arc4", "ml", "lpu-arc-4")))
	conflict := requiredTerms(dryCreate(ctx, t, cs, withTerms(claimTemplatePod("conflict", "ml", "lpu-arc-4"),
		term(corev1.NodeSelectorRequirement{Key: arcslice.LabelLargestFreeArc, Operator: corev1.NodeSelectorOpIn, Values: []string{"0"}}))))
	be4 := requiredTerms(dryCreate(ctx, t, cs, claimTemplatePod("be4", "ml", "lpu-4-best-effort")))
	pinned := func(name string, terms []corev1.NodeSelectorTerm, node string) *corev1.Pod {
		p := withTerms(plainPod(name, "other", nil), slices.Clone(terms)...)
		if node != "" {
			p.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": node}
		}
		return p
	}
	conflictOwn := []corev1.NodeSelectorTerm{term(conflict[0].MatchExpressions[0])}
	for name, tc := range map[string]struct {
		pod   *corev1.Pod
		nodes []string // where it may land; none: stays Pending, unschedulable
	}{
		"an arc-4 pod goes to a node with room (8, or no label)": {pod: pinned("s-arc4", arc4, ""), nodes: []string{"roomy", "unlabelled"}},
		"an arc-4 pod takes the node labelled 8":                 {pod: pinned("s-roomy", arc4, "roomy"), nodes: []string{"roomy"}},
		"its own conflicting affinity: Pending":                  {pod: pinned("s-conflict", conflict, "")},
		"without the prefilter that pod would take 'full'":       {pod: pinned("s-conflict-own", conflictOwn, ""), nodes: []string{"full"}},
		"an unlabelled node qualifies":                           {pod: pinned("s-unlabelled", arc4, "unlabelled"), nodes: []string{"unlabelled"}},
		"a 2-arc node does not take an arc-4 pod":                {pod: pinned("s-frag", arc4, "fragmented")},
		"a best-effort 4 fits on 4 free singles":                 {pod: pinned("s-be4", be4, "fragmented"), nodes: []string{"fragmented"}},
	} {
		if _, err := cs.CoreV1().Pods("other").Create(ctx, tc.pod, metav1.CreateOptions{}); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		t.Run(name, func(t *testing.T) {
			poll(ctx, t, name, func() error {
				p, err := cs.CoreV1().Pods("other").Get(ctx, tc.pod.Name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				if len(tc.nodes) > 0 {
					if p.Spec.NodeName == "" {
						return errString("not scheduled yet")
					}
					if !slices.Contains(tc.nodes, p.Spec.NodeName) {
						t.Fatalf("scheduled to %s, want one of %v", p.Spec.NodeName, tc.nodes)
					}
					return nil
				}
				if p.Spec.NodeName != "" {
					t.Fatalf("scheduled to %s, want Pending", p.Spec.NodeName)
				}
				for _, c := range p.Status.Conditions {
					if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
						if !strings.Contains(c.Message, "didn't match Pod's node affinity/selector") {
							t.Fatalf("unschedulable for another reason: %s", c.Message)
						}
						t.Logf("Pending: %s", c.Message)
						return nil
					}
				}
				return fmt.Errorf("no Unschedulable PodScheduled condition yet: %+v", p.Status.Conditions)
			})
		})
	}
}

// readyNode creates a Ready Node with room for pods and these labels.
func readyNode(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string, labels map[string]string) *corev1.Node {
	t.Helper()
	lbl := map[string]string{"kubernetes.io/hostname": name}
	maps.Copy(lbl, labels)
	n, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbl}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	res := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("16"), corev1.ResourceMemory: resource.MustParse("64Gi"),
		corev1.ResourcePods: resource.MustParse("110")}
	n.Status = corev1.NodeStatus{Capacity: res, Allocatable: res,
		Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}}
	n, err = cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

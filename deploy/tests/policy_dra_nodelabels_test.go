package tests_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/hyperaccel/lpu-node/deploy/charttest"
	"github.com/hyperaccel/lpu-node/internal/clustertest"
	"github.com/hyperaccel/lpu-node/pkg/arcslice"
	"github.com/hyperaccel/lpu-node/pkg/nodelabel"
)

// Substrings of the dra-node-labels policy's messages, one per rule.
const (
	msgOwnNode     = "may label only its own Node"
	msgLabelsOnly  = "may change only the lpu.hyperaccel.ai/ labels of its Node"
	msgMetadata    = "may not change its Node's annotations, owner references or finalizers"
	msgSpec        = "may not change its Node's spec (taints, unschedulable) or status"
	msgValues      = "take decimal numbers of at most 2 digits"
	msgNoCreateDel = "may not create or delete Nodes"
	msgNoNode      = "names no node"
)

// mergePatch is a JSON merge patch of v.
func mergePatch(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func labelPatch(t *testing.T, labels map[string]any) []byte {
	return mergePatch(t, map[string]any{"metadata": map[string]any{"labels": labels}})
}

// TestDRANodeLabelPolicy: with the chart's lpu-dra RBAC and dra-node-labels
// policy in a real v1.37.2 kube-apiserver, lpu-dra's pod-bound token on
// node A keeps node A's prefilter labels through the real
// pkg/nodelabel.Keeper, and cannot touch node B, node A's other labels,
// annotations, finalizers or taints, write a non-numeric or long value,
// create or delete Nodes (refused by RBAC, and by the policy under a wider
// grant) or write nodes/status; a token bound to no pod writes nothing.
// With dra.prefilter.enabled=false the RBAC has no node writes, and the
// Keeper gives up (Run returns nil, Disabled set): lpu-dra runs on.
func TestDRANodeLabelPolicy(t *testing.T) {
	helm := charttest.Helm(t)
	c := clustertest.Start(t, gateClusterOptions)
	cs := kubernetes.NewForConfigOrDie(c.Config)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	const sa = release + "-dra"
	rbac := charttest.Render(t, helm, "--show-only", "templates/dra-rbac.yaml", "mode=dra")
	if kinds := charttest.InstallPolicies(ctx, t, cs, rbac); kinds["ClusterRole"] != 1 {
		t.Fatalf("rendered RBAC kinds %v", kinds)
	}
	policy := charttest.Render(t, helm, "--show-only", "templates/dra-node-label-policy.yaml", "--show-only", charttest.ParamsTemplate, "mode=dra")
	if kinds := charttest.InstallPolicies(ctx, t, cs, policy); len(kinds) != 3 || kinds["ConfigMap"] != 1 || kinds["ValidatingAdmissionPolicy"] != 1 || kinds["ValidatingAdmissionPolicyBinding"] != 1 {
		t.Fatalf("rendered kinds %v, want the policy and its binding", kinds)
	}
	for _, name := range []string{"node-a", "node-b"} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name,
			Labels:      map[string]string{"kubernetes.io/hostname": name, "hyperaccel.ai/lpu.mode": "dra"},
			Annotations: map[string]string{"example.com/owner": "ops"}}}
		if _, err := cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	a := driverClient(ctx, t, c, cs, sa, "node-a")
	nodes := a.CoreV1().Nodes()
	eventuallyPolicy(ctx, t, func() error {
		_, err := nodes.Patch(ctx, "node-b", types.MergePatchType, labelPatch(t, map[string]any{arcslice.LabelLargestFreeArc: "8"}),
			metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		if err == nil {
			return errString("node B's label not refused yet")
		}
		return nil
	})
	noTypeWarnings(ctx, t, cs)

	// The real Keeper with node A's token: the labels land, and a hand
	// edit is put back.
	kctx, stop := context.WithCancel(ctx)
	k := nodelabel.New(nodelabel.Options{Client: a, Node: "node-a", Retry: 100 * time.Millisecond})
	done := make(chan error, 1)
	go func() { done <- k.Run(kctx) }()
	want := arcslice.Free{Arc: 4, LPUs: 6}.Labels()
	k.Set(want)
	waitLabels(ctx, t, cs, "node-a", want)
	if _, err := cs.CoreV1().Nodes().Patch(ctx, "node-a", types.MergePatchType, labelPatch(t, map[string]any{arcslice.LabelLargestFreeArc: "0"}),
		metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitLabels(ctx, t, cs, "node-a", want)
	if err := k.Disabled(); err != nil {
		t.Fatalf("the Keeper gave up: %v", err)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Keeper.Run: %v", err)
	}
	before := map[string]*corev1.Node{}
	for _, name := range []string{"node-a", "node-b"} {
		n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		before[name] = n
	}

	taint := map[string]any{"spec": map[string]any{"taints": []map[string]string{{"key": "example.com/x", "effect": "NoSchedule"}}}}
	for name, tc := range map[string]struct {
		node  string
		patch []byte
		want  string
	}{
		"node B's prefilter label":   {node: "node-b", patch: labelPatch(t, map[string]any{arcslice.LabelLargestFreeArc: "8"}), want: msgOwnNode},
		"node A's mode label":        {node: "node-a", patch: labelPatch(t, map[string]any{"hyperaccel.ai/lpu.mode": "devicePlugin"}), want: msgLabelsOnly},
		"node A's hostname label":    {node: "node-a", patch: labelPatch(t, map[string]any{"kubernetes.io/hostname": "node-b"}), want: msgLabelsOnly},
		"removing a label of node A": {node: "node-a", patch: labelPatch(t, map[string]any{"hyperaccel.ai/lpu.mode": nil}), want: msgLabelsOnly},
		"a new label outside the prefix": {node: "node-a", patch: labelPatch(t, map[string]any{"hyperaccel.ai/lpu.present": "true"}),
			want: msgLabelsOnly},
		"an annotation": {node: "node-a", want: msgMetadata,
			patch: mergePatch(t, map[string]any{"metadata": map[string]any{"annotations": map[string]string{"example.com/owner": "lpu-dra"}}})},
		"a finalizer": {node: "node-a", want: msgMetadata,
			patch: mergePatch(t, map[string]any{"metadata": map[string]any{"finalizers": []string{"example.com/hold"}}})},
		"a taint":             {node: "node-a", patch: mergePatch(t, taint), want: msgSpec},
		"unschedulable":       {node: "node-a", patch: mergePatch(t, map[string]any{"spec": map[string]any{"unschedulable": true}}), want: msgSpec},
		"a non-numeric value": {node: "node-a", patch: labelPatch(t, map[string]any{arcslice.LabelLargestFreeArc: "eight"}), want: msgValues},
		"three digits":        {node: "node-a", patch: labelPatch(t, map[string]any{arcslice.LabelFreeLPUs: "100"}), want: msgValues},
		"a prefilter label and another": {node: "node-a", want: msgLabelsOnly,
			patch: labelPatch(t, map[string]any{arcslice.LabelLargestFreeArc: "8", "kubernetes.io/hostname": "x"})},
	} {
		_, err := nodes.Patch(ctx, tc.node, types.MergePatchType, tc.patch, metav1.PatchOptions{})
		wantRefusalNoFatal(t, name, err, tc.want)
	}
	// Not granted at all: nodes/status, create, delete (the API server's
	// RBAC refuses before admission).
	_, err := nodes.PatchStatus(ctx, "node-a", mergePatch(t, map[string]any{"status": map[string]any{"phase": "Running"}}))
	wantRefusalNoFatal(t, "nodes/status", err, "cannot patch resource \"nodes/status\"")
	wantRefusalNoFatal(t, "delete node A, RBAC", nodes.Delete(ctx, "node-a", metav1.DeleteOptions{}), "cannot delete resource \"nodes\"")
	_, err = nodes.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-c"}}, metav1.CreateOptions{})
	wantRefusalNoFatal(t, "create a Node, RBAC", err, "cannot create resource \"nodes\"")

	// A token bound to no pod names no node.
	tok, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, sa, &authnv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	unbound := kubernetes.NewForConfigOrDie(tokenConfig(c, tok.Status.Token))
	_, err = unbound.CoreV1().Nodes().Patch(ctx, "node-a", types.MergePatchType, labelPatch(t, map[string]any{arcslice.LabelLargestFreeArc: "8"}), metav1.PatchOptions{})
	wantRefusalNoFatal(t, "a token bound to no pod", err, msgNoNode)

	// Nothing of the refused writes landed.
	for name, was := range before {
		n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if n.ResourceVersion != was.ResourceVersion || !equality.Semantic.DeepEqual(n.Labels, was.Labels) {
			t.Errorf("%s changed: labels %v, were %v", name, n.Labels, was.Labels)
		}
	}

	// Should RBAC ever grant more, the policy still refuses Node creation
	// and deletion by lpu-dra.
	wider := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "wider-nodes"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"create", "delete"}}}}
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, wider, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "wider-nodes"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "wider-nodes"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: namespace}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, "delete of node A refused by the policy, not RBAC", func() error {
		err := nodes.Delete(ctx, "node-a", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		if err == nil {
			t.Fatal("lpu-dra deleted node A (dry run)")
		}
		if !apierrors.IsForbidden(err) || !contains(err, msgNoCreateDel) {
			return err
		}
		return nil
	})
	wantRefusalNoFatal(t, "delete node A, policy", nodes.Delete(ctx, "node-a", metav1.DeleteOptions{}), msgNoCreateDel)
	_, err = nodes.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a2"}}, metav1.CreateOptions{})
	wantRefusalNoFatal(t, "create a Node, policy", err, msgNoCreateDel)
	if err := cs.RbacV1().ClusterRoleBindings().Delete(ctx, "wider-nodes", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	// dra.prefilter.enabled=false: the same ClusterRole without node writes
	// (reads stay: the cordoned-LPU annotation).
	off := decodePrefilter(t, charttest.Render(t, helm, "--show-only", "templates/dra-rbac.yaml", "mode=dra", "dra.prefilter.enabled=false"))
	if got := nodeVerbs(t, off.Role); !slices.Equal(got, []string{"get", "list", "watch"}) {
		t.Fatalf("prefilter off: lpu-dra's verbs on nodes %v, want [get list watch]", got)
	}
	if _, err := cs.RbacV1().ClusterRoles().Update(ctx, off.Role, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, "node A's label patch refused by RBAC", func() error {
		_, err := nodes.Patch(ctx, "node-a", types.MergePatchType, labelPatch(t, map[string]any{arcslice.LabelLargestFreeArc: "8"}),
			metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		if !apierrors.IsForbidden(err) || !contains(err, "cannot patch resource \"nodes\"") {
			return fmt.Errorf("patch: %v", err)
		}
		return nil
	})
	k = nodelabel.New(nodelabel.Options{Client: a, Node: "node-a", Retry: 100 * time.Millisecond})
	k.Set(arcslice.Free{Arc: 8, LPUs: 8}.Labels())
	runDone := make(chan error, 1)
	go func() { runDone <- k.Run(ctx) }()
	select {
	case err := <-runDone:
		if err != nil {
			t.Fatalf("Keeper.Run without RBAC: %v, want nil (lpu-dra runs on)", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Keeper.Run without RBAC still running after 30 s, want it to give up")
	}
	if err := k.Disabled(); !apierrors.IsForbidden(err) {
		t.Errorf("Disabled() = %v, want the API server's Forbidden", err)
	}
	n, err := cs.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n.Labels[arcslice.LabelLargestFreeArc] != want[arcslice.LabelLargestFreeArc] {
		t.Errorf("without RBAC node A's label became %q", n.Labels[arcslice.LabelLargestFreeArc])
	}
}

// contains says whether err's text has s.
func contains(err error, s string) bool { return err != nil && strings.Contains(err.Error(), s) }

// waitLabels waits until node has every label of want.
func waitLabels(ctx context.Context, t *testing.T, cs kubernetes.Interface, node string, want map[string]string) {
	t.Helper()
	poll(ctx, t, node+" labelled "+fmt.Sprint(want), func() error {
		n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		got := maps.Clone(n.Labels)
		maps.DeleteFunc(got, func(k string, _ string) bool { _, ok := want[k]; return !ok })
		if !maps.Equal(got, want) {
			return fmt.Errorf("labels %v", n.Labels)
		}
		return nil
	})
}

// prefilterRendering is the part of a rendering the prefilter touches:
// the admission policies (by name, gatePolicies) and their parameters,
// lpu-dra's ClusterRole and the node configs.
type prefilterRendering struct {
	gatePolicies
	Role      *rbacv1.ClusterRole
	ConfigMap *corev1.ConfigMap
	Params    *corev1.ConfigMap
}

func decodePrefilter(t *testing.T, rendered []byte) prefilterRendering {
	t.Helper()
	r := prefilterRendering{gatePolicies: decodeGate(t, rendered)}
	for _, tm := range charttest.Split(t, rendered) {
		doc := tm.Text
		switch tm.Kind {
		case "ClusterRole":
			r.Role = &rbacv1.ClusterRole{}
			charttest.Strict(t, doc, r.Role)
		case "ConfigMap":
			cm := &corev1.ConfigMap{}
			charttest.Strict(t, doc, cm)
			if tm.IsPolicyParams() {
				r.Params = cm
			} else {
				r.ConfigMap = cm
			}
		}
	}
	return r
}

// nodeVerbs are the verbs lpu-dra's ClusterRole grants on nodes.
func nodeVerbs(t *testing.T, role *rbacv1.ClusterRole) []string {
	t.Helper()
	if role == nil {
		t.Fatal("no ClusterRole rendered")
	}
	var verbs []string
	for _, r := range role.Rules {
		if slices.Contains(r.APIGroups, "") && slices.ContainsFunc(r.Resources, func(s string) bool { return strings.HasPrefix(s, "nodes") }) {
			if !slices.Equal(r.Resources, []string{"nodes"}) {
				t.Errorf("rule %+v: lpu-dra needs nodes only (no nodes/status)", r)
			}
			verbs = append(verbs, r.Verbs...)
		}
	}
	return verbs
}

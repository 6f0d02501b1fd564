package deploy_test

import (
	"context"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/hyperaccel/lpu-node/test/clustertest"
)

const (
	requiredPlugins = "required-plugins.noderesource.dev"
	tolerateMissing = "tolerate-missing-plugins.noderesource.dev"
)

// TestRuntimeGatePolicies installs the chart's admission policies in a real
// kube-apiserver (v1.37) and creates pods against them: LPU pods get the
// required-plugins annotation, other pods do not, and the toleration
// annotation (any scope) or a scoped override of the required plugins is
// refused outside the allowlisted namespaces.
func TestRuntimeGatePolicies(t *testing.T) {
	helm := helmBinary(t)
	c := clustertest.Start(t, clustertest.Options{})
	cs := kubernetes.NewForConfigOrDie(c.Config)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// mode=dra: the gate also covers the arcs' extended resources and the
	// chart's claim templates (the device plugin's resource stays covered).
	rendered := render(t, helm, "--show-only", "templates/runtimegate.yaml", "json:runtimeGate.tolerateNamespaces=[\"node-agents\"]", "mode=dra")
	installPolicies(ctx, t, cs, rendered)
	for _, ns := range []string{"tenant", "node-agents", namespace} {
		if ns != namespace {
			if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		// The ServiceAccount admission plugin wants the default account
		// (no controller-manager runs here to create it).
		if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil && !strings.Contains(err.Error(), "already exists") {
			t.Fatal(err)
		}
	}

	lpuPod := func(name, ns string, ann map[string]string) *corev1.Pod {
		p := plainPod(name, ns, ann)
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"hyperaccel.ai/lpu": resource.MustParse("2")}
		return p
	}
	initLPUPod := func(name, ns string) *corev1.Pod {
		p := plainPod(name, ns, nil)
		p.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "busybox",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"hyperaccel.ai/lpu": resource.MustParse("1")}}}}
		return p
	}
	arcPod := func(name, ns string) *corev1.Pod {
		p := plainPod(name, ns, nil)
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"hyperaccel.ai/lpu-arc-4": resource.MustParse("1")}
		return p
	}
	claimPod := func(name, ns, template string) *corev1.Pod {
		p := plainPod(name, ns, nil)
		p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "lpus", ResourceClaimTemplateName: &template}}
		p.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "lpus"}}
		return p
	}
	// Policies become active some time after they are created: retry the
	// first expectation until it holds.
	eventuallyPolicy(ctx, t, func() error {
		p, err := cs.CoreV1().Pods("tenant").Create(ctx, lpuPod("probe", "tenant", nil), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return err
		}
		if p.Annotations[requiredPlugins] != `["lpu"]` {
			return errString("LPU pod not annotated yet: " + p.Annotations[requiredPlugins])
		}
		_, err = cs.CoreV1().Pods("tenant").Create(ctx, plainPod("probe2", "tenant", map[string]string{tolerateMissing: "true"}), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err == nil {
			return errString("toleration not refused yet")
		}
		return nil
	})

	tests := map[string]struct {
		pod      *corev1.Pod
		wantErr  string // "" created
		required string // expected required-plugins annotation on the created pod
	}{
		"LPU pod is gated":                        {pod: lpuPod("lpu", "tenant", nil), required: `["lpu"]`},
		"LPU in an init container is gated":       {pod: initLPUPod("init", "tenant"), required: `["lpu"]`},
		"LPU pod's own required plugins replaced": {pod: lpuPod("own", "tenant", map[string]string{requiredPlugins: `["other"]`}), required: `["lpu"]`},
		"pod without LPU is not gated":            {pod: plainPod("plain", "tenant", nil)},
		"DRA arc extended resource is gated":      {pod: arcPod("arc", "tenant"), required: `["lpu"]`},
		"DRA claim template is gated":             {pod: claimPod("claim", "tenant", "lpu-4-best-effort"), required: `["lpu"]`},
		"other claim template is not gated":       {pod: claimPod("gpu", "tenant", "gpu-claim")},
		"toleration refused for a tenant": {
			pod:     lpuPod("tol", "tenant", map[string]string{tolerateMissing: "true"}),
			wantErr: "lets a pod start while lpu-nri is down",
		},
		"pod-scoped toleration refused": {
			pod:     plainPod("tolpod", "tenant", map[string]string{tolerateMissing + "/pod": "true"}),
			wantErr: "lets a pod start while lpu-nri is down",
		},
		"container-scoped toleration refused": {
			pod:     plainPod("tolctr", "tenant", map[string]string{tolerateMissing + "/container.main": "true"}),
			wantErr: "lets a pod start while lpu-nri is down",
		},
		"container-scoped required plugins override refused": {
			pod:     lpuPod("override", "tenant", map[string]string{requiredPlugins + "/container.main": "[]"}),
			wantErr: "no scoped variant",
		},
		"toleration allowed in an allowlisted namespace": {pod: plainPod("agent", "node-agents", map[string]string{tolerateMissing: "true"})},
		"toleration allowed in the release namespace":    {pod: plainPod("lpu-node", namespace, map[string]string{tolerateMissing: "true"})},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := cs.CoreV1().Pods(tc.pod.Namespace).Create(ctx, tc.pod, metav1.CreateOptions{})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("create = %v, want refusal containing %q", err, tc.wantErr)
				}
				t.Logf("refused as it must: %v", err)
				return
			}
			if err != nil {
				t.Fatalf("create: %v", err)
			}
			if v, ok := got.Annotations[requiredPlugins]; v != tc.required || ok != (tc.required != "") {
				t.Errorf("%s = %q (present %v), want %q", requiredPlugins, v, ok, tc.required)
			}
		})
	}
}

func plainPod(name, ns string, ann map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: ann},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox"}}},
	}
}

type errString string

func (e errString) Error() string { return string(e) }

// eventuallyPolicy retries check for up to a minute.
func eventuallyPolicy(ctx context.Context, t *testing.T, check func() error) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("policies not in effect after a minute: %v", err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// installPolicies creates the rendered policies and bindings.
func installPolicies(ctx context.Context, t *testing.T, cs kubernetes.Interface, rendered []byte) {
	t.Helper()
	kinds := map[string]int{}
	for _, doc := range docSep.Split(string(rendered), -1) {
		if strings.TrimSpace(stripComments(doc)) == "" {
			continue
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
			t.Fatal(err)
		}
		kinds[tm.Kind]++
		var err error
		switch tm.Kind {
		case "MutatingAdmissionPolicy":
			var o admissionv1.MutatingAdmissionPolicy
			strict(t, doc, &o)
			_, err = cs.AdmissionregistrationV1().MutatingAdmissionPolicies().Create(ctx, &o, metav1.CreateOptions{})
		case "MutatingAdmissionPolicyBinding":
			var o admissionv1.MutatingAdmissionPolicyBinding
			strict(t, doc, &o)
			_, err = cs.AdmissionregistrationV1().MutatingAdmissionPolicyBindings().Create(ctx, &o, metav1.CreateOptions{})
		case "ValidatingAdmissionPolicy":
			var o admissionv1.ValidatingAdmissionPolicy
			strict(t, doc, &o)
			_, err = cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, &o, metav1.CreateOptions{})
		case "ValidatingAdmissionPolicyBinding":
			var o admissionv1.ValidatingAdmissionPolicyBinding
			strict(t, doc, &o)
			_, err = cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, &o, metav1.CreateOptions{})
		default:
			t.Fatalf("unexpected kind %s in the runtime gate", tm.Kind)
		}
		if err != nil {
			t.Fatalf("create %s: %v", tm.Kind, err)
		}
	}
	if len(kinds) != 4 {
		t.Fatalf("rendered kinds %v, want the two policies and their bindings", kinds)
	}
}

func strict(t *testing.T, doc string, into any) {
	t.Helper()
	if err := yaml.UnmarshalStrict([]byte(doc), into); err != nil {
		t.Fatalf("strict decode: %v\n%s", err, doc)
	}
}

package tests_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/hyperaccel/lpu-node/deploy/charttest"
	"github.com/hyperaccel/lpu-node/internal/clustertest"
)

const (
	requiredPlugins = "required-plugins.noderesource.dev"
	tolerateMissing = "tolerate-missing-plugins.noderesource.dev"
	// lpuTenantLabel marks the namespaces the test's claim selector picks.
	lpuTenantLabel = "example.com/lpu-tenant"
)

// Substrings of the policies' messages.
const (
	msgToleration = "lets a pod start while lpu-nri is down"
	msgScoped     = "no scoped variant"
	msgClaims     = "may reach LPUs"
	msgImmutable  = "an update may not remove or change it"
)

// gateClusterOptions run kube-apiserver and, of kube-controller-manager,
// only the controller that type-checks ValidatingAdmissionPolicies
// (noTypeWarnings reads its result).
var gateClusterOptions = clustertest.Options{ControllerManager: true,
	ControllerManagerFlags: []string{"--controllers=validatingadmissionpolicy-status-controller"}}

// TestRuntimeGatePolicies installs the chart's admission policies (mode dra,
// claims gated in namespaces labelled lpuTenantLabel) in a real
// kube-apiserver v1.37 and creates and updates pods against them.
func TestRuntimeGatePolicies(t *testing.T) {
	helm := charttest.Helm(t)
	c := clustertest.Start(t, gateClusterOptions)
	cs := kubernetes.NewForConfigOrDie(c.Config)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	rendered := charttest.Render(t, helm, "--show-only", "templates/runtimegate.yaml", "--show-only", charttest.ParamsTemplate, "mode=dra",
		"json:runtimeGate.tolerateNamespaces=[\"node-agents\"]",
		"json:runtimeGate.lpuResources=[\"example.com/lpu-slice\"]",
		"json:runtimeGate.lpuDeviceClasses=[\"custom-lpu.example.com\"]",
		"json:runtimeGate.claimNamespaceSelector={\"matchLabels\":{\""+lpuTenantLabel+"\":\"true\"}}")
	makeNamespaces(ctx, t, cs, map[string]map[string]string{
		"tenant": {lpuTenantLabel: "true"}, "gpu-team": nil, "node-agents": nil, namespace: nil})
	// Pods made before the gate existed: it must catch them at their next
	// update.
	for _, p := range []*corev1.Pod{
		lpuPod("old-lpu", "tenant", nil),
		lpuPod("old-other", "tenant", map[string]string{requiredPlugins: `["other"]`}),
		plainPod("old-tol", "tenant", map[string]string{tolerateMissing: "true"}),
		claimNamePod("old-claim", "tenant", "shared"),
	} {
		if _, err := cs.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if kinds := charttest.InstallPolicies(ctx, t, cs, rendered); len(kinds) != 5 || kinds["MutatingAdmissionPolicy"] != 2 || kinds["ValidatingAdmissionPolicy"] != 4 || kinds["ConfigMap"] != 1 {
		t.Fatalf("rendered kinds %v, want the two policies for pods and for claim pods, the two for LPU claims and templates, their bindings and parameters", kinds)
	}
	waitForGate(ctx, t, cs)
	noTypeWarnings(ctx, t, cs)
	t.Run("create", func(t *testing.T) { testGateCreate(ctx, t, cs) })
	t.Run("update", func(t *testing.T) { testGateUpdate(ctx, t, cs) })
	t.Run("created before the gate", func(t *testing.T) { testGateBefore(ctx, t, cs) })
	t.Run("subresources", func(t *testing.T) { testGateSubresources(ctx, t, cs) })
	t.Run("claim scope", func(t *testing.T) { testGateClaimScope(ctx, t, cs, c.Config) })
	t.Run("annotation values", func(t *testing.T) { testGateAnnotationValues(ctx, t, cs) })
	// Last: it takes the parameters away.
	t.Run("without parameters", func(t *testing.T) { testGateWithoutParams(ctx, t, cs) })
}

// testGateWithoutParams: with the policy-params ConfigMap gone the gate
// fails closed (the bindings' parameterNotFoundAction Deny): an LPU pod is
// refused rather than created ungated.
func testGateWithoutParams(ctx context.Context, t *testing.T, cs kubernetes.Interface) {
	if err := cs.CoreV1().ConfigMaps(namespace).Delete(ctx, release+"-policy-params", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	eventuallyPolicy(ctx, t, func() error {
		p, err := cs.CoreV1().Pods("tenant").Create(ctx, lpuPod("noparams", "tenant", nil), dry)
		if err == nil {
			return errString("an LPU pod is still admitted, annotated " + p.Annotations[requiredPlugins])
		}
		if !strings.Contains(err.Error(), "no params found") {
			return err
		}
		t.Logf("refused as it must: %v", err)
		return nil
	})
}

// testGateCreate: LPU pods get the required-plugins annotation, other pods
// do not, and the toleration annotation (any scope) or a scoped override of
// the required plugins is refused outside the allowlisted namespaces.
func testGateCreate(ctx context.Context, t *testing.T, cs kubernetes.Interface) {
	tests := map[string]struct {
		pod      *corev1.Pod
		wantErr  string // "" created
		required string // expected required-plugins annotation on the created pod
	}{
		"LPU pod is gated":                       {pod: lpuPod("lpu", "tenant", nil), required: `["lpu"]`},
		"LPU in an init container is gated":      {pod: initLPUPod("init", "tenant"), required: `["lpu"]`},
		"LPU pod's own required plugins kept":    {pod: lpuPod("own", "tenant", map[string]string{requiredPlugins: `["other"]`}), required: `["other", "lpu"]`},
		"a block list is refused, not spliced":   {pod: lpuPod("block", "tenant", map[string]string{requiredPlugins: "- gpu\n- other"}), wantErr: msgForm},
		"a list naming the plugin is kept as is": {pod: lpuPod("listed", "tenant", map[string]string{requiredPlugins: `["gpu","lpu"]`}), required: `["gpu","lpu"]`},
		"an empty list becomes the plugin":       {pod: lpuPod("empty", "tenant", map[string]string{requiredPlugins: `[]`}), required: `["lpu"]`},
		"pod without LPU is not gated":           {pod: plainPod("plain", "tenant", nil)},
		"DRA arc extended resource is gated":     {pod: resourcePod("arc", "gpu-team", "hyperaccel.ai/lpu-arc-4"), required: `["lpu"]`},
		"an LPU class's implicit resource is gated everywhere": {
			pod: resourcePod("implicit", "gpu-team", "deviceclass.resource.kubernetes.io/lpu-arc-4.hyperaccel.ai"), required: `["lpu"]`},
		"listed extra resource is gated": {pod: resourcePod("extra", "gpu-team", "example.com/lpu-slice"), required: `["lpu"]`},
		"chart claim template is gated everywhere": {
			pod: claimTemplatePod("claim", "gpu-team", "lpu-4-best-effort"), required: `["lpu"]`},
		"standalone claim is gated in an LPU namespace":   {pod: claimNamePod("named", "tenant", "shared"), required: `["lpu"]`},
		"own claim template is gated in an LPU namespace": {pod: claimTemplatePod("mine", "tenant", "my-lpus"), required: `["lpu"]`},
		"any class's implicit resource is gated in an LPU namespace": {
			pod: resourcePod("anyclass", "tenant", "deviceclass.resource.kubernetes.io/custom.example.com"), required: `["lpu"]`},
		"standalone claim elsewhere is not gated":     {pod: claimNamePod("gpu", "gpu-team", "gpu-claim")},
		"other claim template elsewhere is not gated": {pod: claimTemplatePod("gputmpl", "gpu-team", "gpu-claim")},
		"other class's resource elsewhere is not gated": {
			pod: resourcePod("gpuclass", "gpu-team", "deviceclass.resource.kubernetes.io/gpu.example.com")},
		"toleration refused for a tenant": {pod: lpuPod("tol", "tenant", map[string]string{tolerateMissing: "true"}), wantErr: msgToleration},
		"pod-scoped toleration refused":   {pod: plainPod("tolpod", "tenant", map[string]string{tolerateMissing + "/pod": "true"}), wantErr: msgToleration},
		"container-scoped toleration refused": {
			pod: plainPod("tolctr", "gpu-team", map[string]string{tolerateMissing + "/container.main": "true"}), wantErr: msgToleration},
		"container-scoped required plugins override refused": {
			pod: lpuPod("override", "tenant", map[string]string{requiredPlugins + "/container.main": "[]"}), wantErr: msgScoped},
		"claim pod's scoped override refused in an LPU namespace": {
			pod: withAnn(claimNamePod("claimover", "tenant", "shared"), requiredPlugins+"/pod", "[]"), wantErr: msgClaims},
		"toleration allowed in an allowlisted namespace": {pod: plainPod("agent", "node-agents", map[string]string{tolerateMissing: "true"})},
		"toleration allowed in the release namespace":    {pod: plainPod("lpu-node", namespace, map[string]string{tolerateMissing: "true"})},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := cs.CoreV1().Pods(tc.pod.Namespace).Create(ctx, tc.pod, metav1.CreateOptions{})
			if tc.wantErr != "" {
				wantRefusal(t, err, tc.wantErr)
				return
			}
			if err != nil {
				t.Fatalf("create: %v", err)
			}
			wantRequired(t, got, tc.required)
		})
	}
}

// testGateUpdate: once a pod is gated, no update takes the gate off (remove,
// change, scoped override, added toleration), and unrelated updates keep
// it; annotations the gate did not set stay the pod owner's.
func testGateUpdate(ctx context.Context, t *testing.T, cs kubernetes.Interface) {
	setAnn := func(k, v string) func(*corev1.Pod) {
		return func(p *corev1.Pod) { metav1.SetMetaDataAnnotation(&p.ObjectMeta, k, v) }
	}
	tests := map[string]struct {
		pod      *corev1.Pod
		change   func(*corev1.Pod)
		wantErr  string
		required string // after the update
	}{
		"unrelated update keeps the gate": {pod: lpuPod("u-label", "tenant", nil), required: `["lpu"]`,
			change: func(p *corev1.Pod) { metav1.SetMetaDataLabel(&p.ObjectMeta, "touched", "yes") }},
		"removing the annotation is refused": {pod: lpuPod("u-remove", "tenant", nil), wantErr: msgImmutable,
			change: func(p *corev1.Pod) { delete(p.Annotations, requiredPlugins) }},
		"adding a plugin is refused":      {pod: lpuPod("u-add", "tenant", nil), wantErr: msgImmutable, change: setAnn(requiredPlugins, `["lpu","other"]`)},
		"replacing the plugin is refused": {pod: lpuPod("u-replace", "tenant", nil), wantErr: msgImmutable, change: setAnn(requiredPlugins, `["other"]`)},
		"a scoped override is refused": {pod: lpuPod("u-scoped", "tenant", nil), wantErr: msgImmutable,
			change: setAnn(requiredPlugins+"/container.main", "[]")},
		"adding a toleration is refused": {pod: lpuPod("u-tol", "tenant", nil), wantErr: msgToleration, change: setAnn(tolerateMissing, "true")},
		"adding a pod-scoped toleration to a plain pod is refused": {pod: plainPod("u-tolplain", "gpu-team", nil), wantErr: msgToleration,
			change: setAnn(tolerateMissing+"/pod", "true")},
		"a claim pod's annotation cannot be removed": {pod: claimNamePod("u-claim", "tenant", "shared"), wantErr: msgImmutable + "|" + msgClaims,
			change: func(p *corev1.Pod) { delete(p.Annotations, requiredPlugins) }},
		"an ungated pod's own required plugins stay its owner's": {
			pod:    withAnn(claimNamePod("u-gpu", "gpu-team", "gpu-claim"), requiredPlugins, `["other"]`),
			change: setAnn(requiredPlugins, `["gpu"]`), required: `["gpu"]`},
		"a toleration may be added in the release namespace": {pod: plainPod("u-agent", namespace, nil), change: setAnn(tolerateMissing, "true")},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if _, err := cs.CoreV1().Pods(tc.pod.Namespace).Create(ctx, tc.pod, metav1.CreateOptions{}); err != nil {
				t.Fatalf("create: %v", err)
			}
			got, err := updatePod(ctx, cs, tc.pod.Namespace, tc.pod.Name, tc.change)
			if tc.wantErr != "" {
				wantRefusal(t, err, tc.wantErr)
				return
			}
			if err != nil {
				t.Fatalf("update: %v", err)
			}
			wantRequired(t, got, tc.required)
		})
	}
	// A patch is an update to admission: a merge patch deleting the key is
	// refused like a PUT.
	if _, err := cs.CoreV1().Pods("tenant").Create(ctx, lpuPod("u-patch", "tenant", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err := cs.CoreV1().Pods("tenant").Patch(ctx, "u-patch", types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"`+requiredPlugins+`":null}}}`), metav1.PatchOptions{})
	wantRefusal(t, err, msgImmutable)
}

// testGateBefore: pods created before the gate was installed are gated at
// their next update, and a toleration they already carry may stay but not
// change.
func testGateBefore(ctx context.Context, t *testing.T, cs kubernetes.Interface) {
	touch := func(p *corev1.Pod) { metav1.SetMetaDataLabel(&p.ObjectMeta, "touched", "yes") }
	for name, required := range map[string]string{"old-lpu": `["lpu"]`, "old-other": `["other", "lpu"]`, "old-claim": `["lpu"]`, "old-tol": ""} {
		got, err := updatePod(ctx, cs, "tenant", name, touch)
		if err != nil {
			t.Fatalf("update %s: %v", name, err)
		}
		wantRequired(t, got, required)
	}
	_, err := updatePod(ctx, cs, "tenant", "old-tol", func(p *corev1.Pod) { p.Annotations[tolerateMissing] = "false" })
	wantRefusal(t, err, msgToleration)
}

// testGateSubresources: the status, ephemeralcontainers and resize
// subresources carry a whole pod; whatever they do with its metadata, the
// stored annotation stays.
func testGateSubresources(ctx context.Context, t *testing.T, cs kubernetes.Interface) {
	pods := cs.CoreV1().Pods("tenant")
	if _, err := pods.Create(ctx, lpuPod("sub", "tenant", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	calls := map[string]func(p *corev1.Pod) error{
		"status": func(p *corev1.Pod) error { _, err := pods.UpdateStatus(ctx, p, metav1.UpdateOptions{}); return err },
		"ephemeralcontainers": func(p *corev1.Pod) error {
			p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug", Image: "busybox"}}}
			_, err := pods.UpdateEphemeralContainers(ctx, p.Name, p, metav1.UpdateOptions{})
			return err
		},
		"resize": func(p *corev1.Pod) error {
			_, err := pods.UpdateResize(ctx, p.Name, p, metav1.UpdateOptions{})
			return err
		},
	}
	for name, call := range calls {
		p, err := pods.Get(ctx, "sub", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		delete(p.Annotations, requiredPlugins)
		p.Annotations[tolerateMissing] = "true"
		err = call(p)
		t.Logf("%s with the annotation removed and a toleration added: %v", name, err)
		got, err := pods.Get(ctx, "sub", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := got.Annotations[tolerateMissing]; ok || got.Annotations[requiredPlugins] != `["lpu"]` {
			t.Errorf("after %s: annotations %v, want the gate's and no toleration", name, got.Annotations)
		}
	}
}

// wantRefusal fails unless err contains want, or one of its
// "|"-separated alternatives (when two policies refuse the same request,
// the apiserver reports one of them).
func wantRefusal(t *testing.T, err error, want string) {
	t.Helper()
	if err != nil && slices.ContainsFunc(strings.Split(want, "|"), func(w string) bool { return strings.Contains(err.Error(), w) }) {
		t.Logf("refused as it must: %v", err)
		return
	}
	t.Fatalf("got %v, want refusal containing %q", err, want)
}

func wantRequired(t *testing.T, p *corev1.Pod, want string) {
	t.Helper()
	if v, ok := p.Annotations[requiredPlugins]; v != want || ok != (want != "") {
		t.Errorf("%s = %q (present %v), want %q", requiredPlugins, v, ok, want)
	}
}

// updatePod reads the pod, applies change and writes it back.
func updatePod(ctx context.Context, cs kubernetes.Interface, ns, name string, change func(*corev1.Pod)) (*corev1.Pod, error) {
	p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	change(p)
	return cs.CoreV1().Pods(ns).Update(ctx, p, metav1.UpdateOptions{})
}

func plainPod(name, ns string, ann map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: ann},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "busybox"}}},
	}
}

// withAnn sets one annotation on p and returns it.
func withAnn(p *corev1.Pod, k, v string) *corev1.Pod {
	metav1.SetMetaDataAnnotation(&p.ObjectMeta, k, v)
	return p
}

func resourcePod(name, ns, res string) *corev1.Pod {
	p := plainPod(name, ns, nil)
	p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceName(res): resource.MustParse("1")}
	return p
}

func lpuPod(name, ns string, ann map[string]string) *corev1.Pod {
	p := resourcePod(name, ns, "hyperaccel.ai/lpu")
	p.Annotations = ann
	return p
}

func initLPUPod(name, ns string) *corev1.Pod {
	p := plainPod(name, ns, nil)
	p.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "busybox",
		Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"hyperaccel.ai/lpu": resource.MustParse("1")}}}}
	return p
}

func claimTemplatePod(name, ns, template string) *corev1.Pod {
	p := plainPod(name, ns, nil)
	p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "lpus", ResourceClaimTemplateName: &template}}
	p.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "lpus"}}
	return p
}

func claimNamePod(name, ns, claim string) *corev1.Pod {
	p := plainPod(name, ns, nil)
	p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "lpus", ResourceClaimName: &claim}}
	p.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "lpus"}}
	return p
}

// makeNamespaces creates the namespaces (with their labels) and their
// default ServiceAccounts, which the ServiceAccount admission plugin wants
// (no controller-manager runs here to create them).
func makeNamespaces(ctx context.Context, t *testing.T, cs kubernetes.Interface, nss map[string]map[string]string) {
	t.Helper()
	for ns, labels := range nss {
		_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: labels}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		_, err = cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
}

// waitForGate waits until the policies are in effect (they become active
// some time after they are created): an LPU pod and a claim pod get
// annotated and a toleration is refused, in a dry run.
func waitForGate(ctx context.Context, t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	eventuallyPolicy(ctx, t, func() error {
		for _, probe := range []*corev1.Pod{lpuPod("probe", "tenant", nil), claimNamePod("probe", "tenant", "shared")} {
			p, err := cs.CoreV1().Pods("tenant").Create(ctx, probe, dry)
			if err != nil {
				return err
			}
			if p.Annotations[requiredPlugins] != `["lpu"]` {
				return errString("pod not annotated yet: " + p.Annotations[requiredPlugins])
			}
		}
		if _, err := cs.CoreV1().Pods("tenant").Create(ctx, plainPod("probe2", "tenant", map[string]string{tolerateMissing: "true"}), dry); err == nil {
			return errString("toleration not refused yet")
		}
		return nil
	})
}

// noTypeWarnings waits for the apiserver to type-check every
// ValidatingAdmissionPolicy against the schemas it matches and fails on any
// warning (a misspelt field would only show there, and the expression would
// then fail at admission).
func noTypeWarnings(ctx context.Context, t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	eventuallyPolicy(ctx, t, func() error {
		list, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, p := range list.Items {
			if p.Status.TypeChecking == nil || p.Status.ObservedGeneration != p.Generation {
				return errString(p.Name + " not type-checked yet")
			}
			for _, w := range p.Status.TypeChecking.ExpressionWarnings {
				t.Errorf("%s: %s: %s", p.Name, w.FieldRef, w.Warning)
			}
		}
		return nil
	})
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

// updateParams replaces the policies' parameters with the rendered
// ConfigMap: the policies read them at each request.
func updateParams(ctx context.Context, t *testing.T, cs kubernetes.Interface, rendered []byte) {
	t.Helper()
	var cm corev1.ConfigMap
	charttest.Strict(t, charttest.StripComments(string(rendered)), &cm)
	if _, err := cs.CoreV1().ConfigMaps(cm.Namespace).Update(ctx, &cm, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update %s: %v", cm.Name, err)
	}
}

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	"github.com/hyperaccel/lpu-node/internal/clustertest"
	"github.com/hyperaccel/lpu-node/pkg/alloc"
	"github.com/hyperaccel/lpu-node/pkg/cordon"
)

// auditPolicy logs Node patches with their request body, nothing else.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: Request
    verbs: ["patch"]
    resources: [{group: "", resources: ["nodes"]}]
  - level: None
`

// operatorRole is what docs/operate.md says an operator needs for kubectl
// lpu cordon, uncordon and --evict.
var operatorRole = []rbacv1.PolicyRule{
	{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "patch"}},
	{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list"}},
	{APIGroups: []string{""}, Resources: []string{"pods/eviction"}, Verbs: []string{"create"}},
	{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceslices", "resourceclaims"}, Verbs: []string{"list"}},
}

// TestCordonAgainstAPIServer runs cordon and uncordon against a real
// kube-apiserver v1.37.2 with an audit log, as a user holding only the
// operator role of docs/operate.md: bad IDs and LPUs the node does not
// publish are refused; the annotation lists the cordoned LPUs sorted;
// eight concurrent cordons all land (the patch carries the
// resourceVersion, a conflict is retried); nodes shows them (table and
// schema-checked JSON) and counts a cordoned LPU as not free; --evict is
// refused by a PodDisruptionBudget, then evicts the claim's pod; a
// device-plugin node is cordoned but --evict says it cannot tell the
// holder; every change is a Node patch by the user in the audit log.
func TestCordonAgainstAPIServer(t *testing.T) {
	dir := t.TempDir()
	policy, auditLog := filepath.Join(dir, "audit-policy.yaml"), filepath.Join(dir, "audit.log")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	c := clustertest.Start(t, clustertest.Options{APIServerFlags: []string{"--audit-policy-file=" + policy, "--audit-log-path=" + auditLog}})
	cs := kubernetes.NewForConfigOrDie(c.Config)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	devicePluginNode(ctx, t, cs, "dp-0", 4)
	draNode(ctx, t, cs, "dra-0")
	claimPod(ctx, t, cs, "default", "dra-job", "dra-0", alloc.Arc{Ring: 0, Start: 2, Size: 2})
	markRunning(ctx, t, cs, "default", "dra-job")
	kc := operatorKubeconfig(ctx, t, c, cs, "operator")

	for args, want := range map[string]string{
		"cordon dra-0 lpu03":  `LPU "lpu03": want an LPU ID such as lpu3`,
		"cordon dra-0 gpu1":   `LPU "gpu1": want an LPU ID`,
		"uncordon dra-0 3":    `LPU "3": want an LPU ID`,
		"cordon dra-0 lpu9":   "node dra-0 publishes no lpu9 (its LPUs: lpu0,lpu1,lpu2,lpu3,lpu4,lpu5,lpu6,lpu7)",
		"cordon nowhere lpu1": `node "nowhere" not found`,
		"cordon dra-0":        "accepts 2 arg(s)",
	} {
		err := run(append(strings.Fields(args), "--kubeconfig", kc), new(bytes.Buffer), new(bytes.Buffer))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("kubectl lpu %s: %v, want %q", args, err, want)
		}
	}
	if got := annotation(ctx, t, cs, "dra-0"); got != "" {
		t.Fatalf("refused commands left the annotation %q", got)
	}

	if out, _ := kl(t, "cordon", "dra-0", "lpu5", "--kubeconfig", kc); out != "node/dra-0 lpu5 cordoned (cordoned now: lpu5)\n" {
		t.Errorf("cordon lpu5: %q", out)
	}
	if out, _ := kl(t, "cordon", "dra-0", "lpu5", "--kubeconfig", kc); out != "node/dra-0 lpu5 already cordoned (cordoned now: lpu5)\n" {
		t.Errorf("cordon lpu5 again: %q", out)
	}
	// Two operators at once, eight times over: no update is lost.
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Go(func() {
			errs <- run([]string{"cordon", "dra-0", fmt.Sprintf("lpu%d", i), "--kubeconfig", kc}, new(bytes.Buffer), new(bytes.Buffer))
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("concurrent cordon: %v", err)
		}
	}
	if got := annotation(ctx, t, cs, "dra-0"); got != "lpu0,lpu1,lpu2,lpu3,lpu4,lpu5,lpu6,lpu7" {
		t.Fatalf("after eight concurrent cordons: %q", got)
	}
	for i := range 8 {
		if i == 3 {
			continue
		}
		kl(t, "uncordon", "dra-0", fmt.Sprintf("lpu%d", i), "--kubeconfig", kc)
	}
	if got := annotation(ctx, t, cs, "dra-0"); got != "lpu3" {
		t.Fatalf("after uncordoning all but lpu3: %q", got)
	}

	out, _ := kl(t, "nodes", "-o", "json", "--kubeconfig", c.Kubeconfig)
	checkSchema(t, []byte(out))
	var l struct {
		Nodes []struct {
			Name     string
			Free     int
			Cordoned []string
		}
	}
	decodeJSON(t, out, &l)
	// dra-job holds lpu2 and lpu3; lpu3 is cordoned besides: 6 free.
	if len(l.Nodes) != 2 || l.Nodes[1].Name != "dra-0" || strings.Join(l.Nodes[1].Cordoned, ",") != "lpu3" || l.Nodes[1].Free != 6 {
		t.Errorf("nodes -o json: %+v", l.Nodes)
	}
	kl(t, "cordon", "dra-0", "lpu6", "--kubeconfig", kc)
	text, _ := kl(t, "nodes", "dra-0", "--kubeconfig", c.Kubeconfig)
	for _, want := range []string{"dra-0  dra  5/8 free, largest free arc 3, cordoned lpu3,lpu6", "  ring0  . . A A . . x .   (lpu0 … lpu7)", "x cordoned"} {
		if !strings.Contains(text, want) {
			t.Errorf("nodes lacks %q:\n%s", want, text)
		}
	}
	kl(t, "uncordon", "dra-0", "lpu6", "--kubeconfig", kc)

	// --evict: a PodDisruptionBudget refuses, the LPU stays cordoned.
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "infer", Namespace: "default"}, Spec: policyv1.PodDisruptionBudgetSpec{
		MinAvailable: ptr.To(intstr.FromInt32(1)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "infer"}}}}
	if _, err := cs.PolicyV1().PodDisruptionBudgets("default").Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var o bytes.Buffer
	err := run([]string{"cordon", "dra-0", "lpu2", "--evict", "--kubeconfig", kc}, &o, new(bytes.Buffer))
	if err == nil || !strings.Contains(err.Error(), "pod/default/dra-job: refused, it would violate its PodDisruptionBudget") {
		t.Errorf("cordon --evict under a PDB: %v\n%s", err, o.String())
	}
	if got := annotation(ctx, t, cs, "dra-0"); got != "lpu2,lpu3" {
		t.Errorf("after a refused eviction: %q, want lpu2,lpu3", got)
	}
	if err := cs.PolicyV1().PodDisruptionBudgets("default").Delete(ctx, "infer", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if out, _ := kl(t, "cordon", "dra-0", "lpu2", "--evict", "--kubeconfig", kc); !strings.Contains(out, "pod/default/dra-job evicted (held lpu2)") {
		t.Errorf("cordon --evict: %q", out)
	}
	if p, err := cs.CoreV1().Pods("default").Get(ctx, "dra-job", metav1.GetOptions{}); err == nil && p.DeletionTimestamp == nil {
		t.Errorf("dra-job after --evict: not being deleted")
	} else if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	if out, _ := kl(t, "cordon", "dra-0", "lpu0", "--evict", "--kubeconfig", kc); !strings.Contains(out, "no pod holds lpu0 on node/dra-0") {
		t.Errorf("cordon --evict of a free LPU: %q", out)
	}

	// A device-plugin node: cordoned; --evict cannot name the holder.
	err = run([]string{"cordon", "dp-0", "lpu1", "--evict", "--kubeconfig", kc}, new(bytes.Buffer), new(bytes.Buffer))
	if err == nil || !strings.Contains(err.Error(), "the API does not say which pod holds lpu1") {
		t.Errorf("cordon dp-0 lpu1 --evict: %v", err)
	}
	if got := annotation(ctx, t, cs, "dp-0"); got != "lpu1" {
		t.Errorf("dp-0 after cordon --evict: %q", got)
	}
	kl(t, "uncordon", "dp-0", "lpu1", "--kubeconfig", kc)
	if n, err := cs.CoreV1().Nodes().Get(ctx, "dp-0", metav1.GetOptions{}); err != nil || hasKey(n.Annotations, cordon.Annotation) {
		t.Errorf("dp-0 after uncordoning its last LPU: %v %v, want no annotation", n.Annotations, err)
	}
	if out, _ := kl(t, "__complete", "uncordon", "--kubeconfig", kc, "dra-0", ""); !strings.HasPrefix(out, "lpu0\nlpu2\nlpu3\n") {
		t.Errorf("completing uncordon's LPU: %q", out)
	}

	// Each change is one Node patch by the user in the audit log, and only
	// a change: of dra-0 lpu5, 7 more of the concurrent eight, 7
	// uncordons, lpu6 and back, lpu2, lpu0 (19); of dp-0 lpu1 and back.
	patches := auditedPatches(t, auditLog)
	if patches["operator dra-0"] != 19 || patches["operator dp-0"] != 2 || len(patches) != 2 {
		t.Errorf("audited Node patches by user and node: %v", patches)
	}
}

// auditedPatches counts the audit log's successful Node patches that
// touch the cordoned-LPU annotation, by "user node" (a patch refused on a
// conflict, retried, is not counted).
func auditedPatches(t *testing.T, path string) map[string]int {
	t.Helper()
	var f *os.File
	deadline := time.Now().Add(10 * time.Second)
	for {
		var err error
		if f, err = os.Open(path); err == nil || time.Now().After(deadline) {
			if err != nil {
				t.Fatal(err)
			}
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	defer f.Close()
	out := map[string]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var ev struct {
			Stage, Verb    string
			User           struct{ Username string }
			ObjectRef      struct{ Resource, Name string }
			ResponseStatus struct{ Code int }
			RequestObject  json.RawMessage
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("audit line: %v", err)
		}
		if ev.Stage == "ResponseComplete" && ev.Verb == "patch" && ev.ObjectRef.Resource == "nodes" && ev.ResponseStatus.Code == 200 &&
			bytes.Contains(ev.RequestObject, []byte(cordon.Annotation)) {
			out[ev.User.Username+" "+ev.ObjectRef.Name]++
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// operatorKubeconfig writes a kubeconfig for user, bound to operatorRole.
func operatorKubeconfig(ctx context.Context, t *testing.T, c *clustertest.Cluster, cs kubernetes.Interface, user string) string {
	t.Helper()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "lpu-operator"}, Rules: operatorRole}
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	b := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "lpu-operator"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "lpu-operator"},
		Subjects: []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: user}}}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, b, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rc, err := c.UserConfig(user)
	if err != nil {
		t.Fatal(err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: rc.Host, CertificateAuthorityData: rc.CAData}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: rc.CertData, ClientKeyData: rc.KeyData}
	cfg.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: user}
	cfg.CurrentContext = "c"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	// RBAC caches: wait until the role takes effect.
	ucs := kubernetes.NewForConfigOrDie(rc)
	for deadline := time.Now().Add(10 * time.Second); ; {
		if _, err := ucs.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	return path
}

// markRunning sets a pod Running and Ready, as its kubelet would: the
// Eviction API ignores PodDisruptionBudgets for Pending pods.
func markRunning(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns, name string) {
	t.Helper()
	p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status.Phase = corev1.PodRunning
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	if _, err := cs.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// annotation is node's cordoned-LPU annotation.
func annotation(ctx context.Context, t *testing.T, cs kubernetes.Interface, node string) string {
	t.Helper()
	n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n.Annotations[cordon.Annotation]
}

func hasKey(m map[string]string, k string) bool {
	_, ok := m[k]
	return ok
}

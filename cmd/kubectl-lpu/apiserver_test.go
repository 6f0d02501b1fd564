package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/hyperaccel/lpu-node/cmd/kubectl-lpu/internal/clusterread"
	"github.com/hyperaccel/lpu-node/internal/clustertest"
	"github.com/hyperaccel/lpu-node/pkg/alloc"
	"github.com/hyperaccel/lpu-node/pkg/arcslice"
	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/inject"
)

// nodeList and podList are what the tests read of the documents.
type nodeList struct {
	APIVersion, Kind string
	DRA              struct {
		Available bool
		Reason    string
	}
	Nodes []struct {
		Name, Mode  string
		Total, Free int
	}
	Summary struct{ Nodes, Total, Free int }
}

type podList []struct {
	APIVersion, Kind, Namespace, Name, Node string
	Count                                   int
	LPUs                                    []string
	Contiguous, Prepared                    *bool
}

// TestAgainstAPIServer runs the plugin against a real kube-apiserver
// v1.37.2 serving resource.k8s.io/v1: a DRA node (lpu-dra's slices for one
// ring of 8) with a pod holding a 2-arc by an allocated claim, and a
// device-plugin node with a pod holding 2 of its 4 LPUs, in namespaces
// default and team-a. Every output kind, -l, -n, -A, --context, version
// and completion of namespaces and contexts; every JSON document checked
// against the schema; a reader not allowed DRA objects gets the
// device-plugin view and the reason.
func TestAgainstAPIServer(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{})
	cs := kubernetes.NewForConfigOrDie(c.Config)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	devicePluginNode(ctx, t, cs, "dp-0", 4)
	draNode(ctx, t, cs, "dra-0")
	lpuPod(ctx, t, cs, "team-a", "dp-job", "dp-0", map[string]string{"app": "trainer"})
	claimPod(ctx, t, cs, "default", "dra-job", "dra-0", alloc.Arc{Ring: 0, Start: 2, Size: 2})
	kc := c.Kubeconfig

	t.Run("nodes", func(t *testing.T) {
		out, _ := kl(t, "nodes", "-o", "json", "--kubeconfig", kc)
		checkSchema(t, []byte(out))
		var l nodeList
		decodeJSON(t, out, &l)
		if l.APIVersion != "lpu.hyperaccel.ai/v1alpha1" || l.Kind != "NodeList" || !l.DRA.Available || len(l.Nodes) != 2 {
			t.Fatalf("nodes -o json: %+v", l)
		}
		if n := l.Nodes[0]; n.Name != "dp-0" || n.Mode != "device-plugin" || n.Total != 4 || n.Free != 2 {
			t.Errorf("dp-0: %+v", n)
		}
		if n := l.Nodes[1]; n.Name != "dra-0" || n.Mode != "dra" || n.Total != 8 || n.Free != 6 {
			t.Errorf("dra-0: %+v", n)
		}
		if out, _ := kl(t, "nodes", "-l", "hyperaccel.ai/lpu.present=true", "-o", "name", "--kubeconfig", kc); out != "node/dp-0\n" {
			t.Errorf("nodes -l … -o name: %q", out)
		}
		if out, _ := kl(t, "nodes", "-o", "jsonpath={.summary.free}/{.summary.total}", "--kubeconfig", kc); out != "8/12" {
			t.Errorf("nodes -o jsonpath: %q", out)
		}
		// NODE alone, as the chart's NOTES and the docs show it.
		if out, _ := kl(t, "nodes", "dra-0", "-o", "jsonpath={.nodes[*].name} {.summary.total}", "--kubeconfig", kc); out != "dra-0 8" {
			t.Errorf("nodes dra-0 -o jsonpath: %q", out)
		}
		if err := run([]string{"nodes", "nowhere", "--kubeconfig", kc}, new(bytes.Buffer), new(bytes.Buffer)); err == nil || !strings.Contains(err.Error(), `node "nowhere" not found`) {
			t.Errorf("nodes nowhere: %v", err)
		}
		if out, _ := kl(t, "__complete", "nodes", "--kubeconfig", kc, ""); !strings.Contains(out, "dp-0\n") || !strings.Contains(out, "dra-0\n") || !strings.Contains(out, ":4\n") {
			t.Errorf("completing NODE: %q", out)
		}
		text, _ := kl(t, "nodes", "--kubeconfig", kc)
		wide, _ := kl(t, "nodes", "-o", "wide", "--kubeconfig", kc)
		for _, want := range []string{"dra-0  dra  6/8 free, largest free arc 6", "  ring0  . . A A . . . .   (lpu0 … lpu7)", "A default/dra-job", "2 nodes, 8/12 LPUs free"} {
			if !strings.Contains(text, want) {
				t.Errorf("nodes lacks %q:\n%s", want, text)
			}
		}
		for _, want := range []string{"(lpu0 lpu1 lpu2 lpu3 lpu4 lpu5 lpu6 lpu7)", "  label hyperaccel.ai/lpu.present=true", "  room 6×1-arc 3×2-arc 1×4-arc 0×8-arc"} {
			if !strings.Contains(wide, want) {
				t.Errorf("nodes -o wide lacks %q:\n%s", want, wide)
			}
		}
	})

	t.Run("pods", func(t *testing.T) {
		out, _ := kl(t, "pods", "-o", "json", "--kubeconfig", kc)
		checkSchema(t, []byte(out))
		var l podList
		decodeJSON(t, out, &l)
		if len(l) != 2 {
			t.Fatalf("pods -o json: %s", out)
		}
		p := l[1]
		if l[0].Name != "dp-job" || l[0].Count != 2 || l[0].Namespace != "team-a" || p.Name != "dra-job" || p.Kind != "Pod" || p.APIVersion != "lpu.hyperaccel.ai/v1alpha1" ||
			strings.Join(p.LPUs, ",") != "lpu2,lpu3" || p.Contiguous == nil || !*p.Contiguous || p.Prepared == nil || *p.Prepared {
			t.Errorf("pods -o json: %+v", l)
		}
		y, _ := kl(t, "pods", "-o", "yaml", "--kubeconfig", kc)
		fromYAML, err := yaml.YAMLToJSON([]byte(y))
		if err != nil {
			t.Fatal(err)
		}
		var a, b any
		decodeJSON(t, out, &a)
		decodeJSON(t, string(fromYAML), &b)
		if ja, jb := mustJSON(t, a), mustJSON(t, b); ja != jb {
			t.Errorf("-o yaml is not -o json:\n%s\n%s", ja, jb)
		}
		for args, want := range map[string]string{
			"pods -n team-a -o name":                      "pod/dp-job\n",
			"pods -n team-a -A -o name":                   "pod/dp-job\npod/dra-job\n",
			"pods -l app=trainer -o name":                 "pod/dp-job\n",
			"pods -l app!=trainer -o jsonpath={[*].name}": "dra-job",
		} {
			if got, _ := kl(t, append(strings.Fields(args), "--kubeconfig", kc)...); got != want {
				t.Errorf("%s: %q, want %q", args, got, want)
			}
		}
		wide, _ := kl(t, "pods", "-o", "wide", "--kubeconfig", kc)
		if !strings.Contains(wide, "CLAIM  DEVICE-NODES") || !strings.Contains(wide, "default/dra-job") || !strings.Contains(wide, " dra-job-lpus  -") {
			t.Errorf("pods -o wide:\n%s", wide)
		}
	})

	t.Run("context", func(t *testing.T) {
		// a kubeconfig whose current context points nowhere: --context
		// picks the working one
		cfg, err := clientcmd.LoadFromFile(kc)
		if err != nil {
			t.Fatal(err)
		}
		good := cfg.CurrentContext
		cfg.Clusters["nowhere"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:1"}
		cfg.Contexts["nowhere"] = &clientcmdapi.Context{Cluster: "nowhere", AuthInfo: cfg.Contexts[good].AuthInfo}
		cfg.CurrentContext = "nowhere"
		two := filepath.Join(t.TempDir(), "kubeconfig")
		if err := clientcmd.WriteToFile(*cfg, two); err != nil {
			t.Fatal(err)
		}
		if err := run([]string{"nodes", "--kubeconfig", two, "--request-timeout", "5s"}, new(bytes.Buffer), new(bytes.Buffer)); err == nil {
			t.Error("nodes on context nowhere: no error")
		}
		if out, _ := kl(t, "nodes", "-o", "name", "--kubeconfig", two, "--context", good); out != "node/dp-0\nnode/dra-0\n" {
			t.Errorf("--context %s: %q", good, out)
		}
		if out, _ := kl(t, "__complete", "nodes", "--kubeconfig", two, "--context", ""); !strings.Contains(out, good+"\n") || !strings.Contains(out, "nowhere\n") {
			t.Errorf("completing --context: %q", out)
		}
		if out, _ := kl(t, "__complete", "pods", "--kubeconfig", kc, "-n", ""); !strings.Contains(out, "team-a\n") || !strings.Contains(out, "default\n") {
			t.Errorf("completing -n: %q", out)
		}
	})

	t.Run("version", func(t *testing.T) {
		out, _ := kl(t, "version", "-o", "json", "--kubeconfig", kc)
		checkSchema(t, []byte(out))
		var v struct{ ClientVersion, ServerVersion string }
		decodeJSON(t, out, &v)
		if v.ClientVersion != version || v.ServerVersion != clustertest.KubernetesVersion {
			t.Errorf("version -o json: %+v", v)
		}
	})

	t.Run("not allowed DRA", func(t *testing.T) {
		// a reader who may list nodes and pods only
		role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "lpu-viewer"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes", "pods"}, Verbs: []string{"list"}}}}
		if _, err := cs.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "lpu-viewer"},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "lpu-viewer"},
			Subjects: []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: "viewer"}}}
		if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		cfg, err := c.UserConfig("viewer")
		if err != nil {
			t.Fatal(err)
		}
		r, err := clusterread.Read(ctx, kubernetes.NewForConfigOrDie(cfg), clusterread.Options{Nodes: true})
		if err != nil {
			t.Fatal(err)
		}
		if r.Cluster.DRA.Available || !strings.Contains(r.Cluster.DRA.Reason, "not allowed to list resourceslices") ||
			len(r.Cluster.Nodes) != 1 || r.Cluster.Nodes[0].Name != "dp-0" || len(r.Warnings) == 0 || !strings.HasPrefix(r.Warnings[0], "DRA data unavailable: not allowed") {
			t.Errorf("viewer: DRA %+v, nodes %+v, warnings %q", r.Cluster.DRA, r.Cluster.Nodes, r.Warnings)
		}
	})
}

// TestWithoutDRA runs the plugin against a kube-apiserver that does not
// serve resource.k8s.io/v1: the device-plugin node and its pod are shown,
// the documents say DRA data is unavailable and why, and a warning says
// so on stderr.
func TestWithoutDRA(t *testing.T) {
	// The Node authorizer's graph watches ResourceSlices and would keep
	// the apiserver from becoming ready without them: RBAC only, as a
	// cluster of a release before resource.k8s.io/v1 authorizes.
	c := clustertest.Start(t, clustertest.Options{AuthorizationMode: "RBAC", APIServerFlags: []string{"--runtime-config=resource.k8s.io/v1=false"}})
	cs := kubernetes.NewForConfigOrDie(c.Config)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := cs.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{}); err == nil {
		t.Fatal("the apiserver still serves resource.k8s.io/v1")
	}
	devicePluginNode(ctx, t, cs, "dp-0", 8)
	lpuPod(ctx, t, cs, "default", "dp-job", "dp-0", nil)

	out, errOut := kl(t, "nodes", "-o", "json", "--kubeconfig", c.Kubeconfig)
	checkSchema(t, []byte(out))
	var l nodeList
	decodeJSON(t, out, &l)
	if l.DRA.Available || !strings.Contains(l.DRA.Reason, "does not serve resource.k8s.io/v1") || len(l.Nodes) != 1 || l.Nodes[0].Free != 6 {
		t.Errorf("nodes -o json: %+v", l)
	}
	if !strings.Contains(errOut, "Warning: DRA data unavailable: the cluster does not serve resource.k8s.io/v1") {
		t.Errorf("stderr: %q", errOut)
	}
	if text, _ := kl(t, "nodes", "--kubeconfig", c.Kubeconfig); !strings.Contains(text, "dp-0  device-plugin  6/8 free, largest free arc ?") {
		t.Errorf("nodes:\n%s", text)
	}
	out, _ = kl(t, "pods", "-o", "json", "--kubeconfig", c.Kubeconfig)
	checkSchema(t, []byte(out))
	var pods podList
	decodeJSON(t, out, &pods)
	if len(pods) != 1 || pods[0].Name != "dp-job" || pods[0].Count != 2 {
		t.Errorf("pods -o json: %s", out)
	}
}

// kl runs the plugin and returns stdout and stderr; it fails the test on
// an error.
func kl(t *testing.T, args ...string) (string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	if err := run(args, &out, &errOut); err != nil {
		t.Fatalf("kubectl lpu %s: %v\n%s", strings.Join(args, " "), err, errOut.String())
	}
	return out.String(), errOut.String()
}

func decodeJSON(t *testing.T, s string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(s), v); err != nil {
		t.Fatalf("%v\n%s", err, s)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func lpus(n int64) corev1.ResourceList {
	return corev1.ResourceList{"hyperaccel.ai/lpu": *resource.NewQuantity(n, resource.DecimalSI)}
}

// devicePluginNode creates a node whose allocatable has n LPUs, as the
// device plugin's kubelet reports.
func devicePluginNode(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string, n int64) {
	t.Helper()
	node, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name,
		Labels: map[string]string{"hyperaccel.ai/lpu.present": "true"}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Status.Capacity, node.Status.Allocatable = lpus(n), lpus(n)
	if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// draNode creates a node and the ResourceSlices lpu-dra publishes for one
// ring of 8 LPUs, arcs of 1, 2, 4 and 8.
func draNode(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string) {
	t.Helper()
	if _, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	inv := &device.Inventory{}
	var ring []string
	for i := 0; i < 8; i++ {
		inv.Devices = append(inv.Devices, device.Device{ID: device.ID(i), Index: i, Health: device.Health{Healthy: true}})
		ring = append(ring, device.ID(i))
	}
	inv.Rings = [][]string{ring}
	b, err := arcslice.NewBuilder(inv, arcslice.Options{Sizes: []int{1, 2, 4, 8}})
	if err != nil {
		t.Fatal(err)
	}
	built := b.Slices(nil, nil)
	for i, s := range built {
		rs := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: name + "-" + string(rune('a'+i))}, Spec: resourceapi.ResourceSliceSpec{
			Driver: inject.Driver, NodeName: ptr.To(name), Devices: s.Devices, SharedCounters: s.SharedCounters,
			Pool: resourceapi.ResourcePool{Name: name, Generation: 1, ResourceSliceCount: int64(len(built))}}}
		if _, err := cs.ResourceV1().ResourceSlices().Create(ctx, rs, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create slice %d: %v", i, err)
		}
	}
}

// ensureNamespace creates namespace ns and its default ServiceAccount (no
// controller-manager runs), if missing.
func ensureNamespace(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns string) {
	t.Helper()
	if _, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err != nil {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cs.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{}); err != nil {
		if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// lpuPod creates a pod bound to node asking the device plugin for 2 LPUs.
func lpuPod(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns, name, node string, labels map[string]string) {
	t.Helper()
	ensureNamespace(ctx, t, cs, ns)
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Spec: corev1.PodSpec{NodeName: node,
		Containers: []corev1.Container{{Name: "main", Image: "example/lpu-worker", Resources: corev1.ResourceRequirements{Limits: lpus(2), Requests: lpus(2)}}}}}
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// claimPod creates a pod bound to node with a ResourceClaim NAME-lpus
// allocated the arc on lpu-dra's pool of the node and reserved for it, as
// the scheduler leaves them.
func claimPod(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns, name, node string, arc alloc.Arc) {
	t.Helper()
	ensureNamespace(ctx, t, cs, ns)
	claimName := name + "-lpus"
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: claimName}, Spec: resourceapi.ResourceClaimSpec{
		Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "lpus",
			Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "lpu.hyperaccel.ai"}}}}}}
	claim, err := cs.ResourceV1().ResourceClaims(ns).Create(ctx, claim, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "infer"}}, Spec: corev1.PodSpec{NodeName: node,
		ResourceClaims: []corev1.PodResourceClaim{{Name: "lpus", ResourceClaimName: &claimName}},
		Containers: []corev1.Container{{Name: "main", Image: "example/lpu-worker", Resources: corev1.ResourceRequirements{
			Claims: []corev1.ResourceClaim{{Name: "lpus"}}}}}}}
	pod, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	claim.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
		Request: "lpus", Driver: inject.Driver, Pool: node, Device: arcslice.DeviceName(arc)}}}}
	claim.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: name, UID: pod.UID}}
	if _, err := cs.ResourceV1().ResourceClaims(ns).UpdateStatus(ctx, claim, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

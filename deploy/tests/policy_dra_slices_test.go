package tests_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/hyperaccel/lpu-node/deploy/charttest"
	"github.com/hyperaccel/lpu-node/internal/clustertest"
	"github.com/hyperaccel/lpu-node/pkg/inject"
)

// msgNodeSlices is a substring of the dra-node-slices policy's message.
const msgNodeSlices = "may write only its own node's ResourceSlices"

// TestDRASlicePolicy is F4 of the fourth round against a real v1.37.2
// kube-apiserver: with the chart's lpu-dra RBAC and dra-node-slices
// policy installed, a pod-bound token of lpu-dra on node A publishes its
// own pool through the kubelet plugin helper's real publisher, and
// cannot create, update, move or delete node B's slices or another
// driver's, nor delete a collection; a token bound to no pod writes none.
func TestDRASlicePolicy(t *testing.T) {
	helm := charttest.Helm(t)
	c := clustertest.Start(t, gateClusterOptions)
	cs := kubernetes.NewForConfigOrDie(c.Config)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	const sa = release + "-dra"
	if kinds := charttest.InstallPolicies(ctx, t, cs, charttest.Render(t, helm, "--show-only", "templates/dra-rbac.yaml", "mode=dra")); kinds["ServiceAccount"] != 1 || kinds["ClusterRole"] != 1 {
		t.Fatalf("rendered RBAC kinds %v", kinds)
	}
	policy := charttest.Render(t, helm, "--show-only", "templates/dra-slice-policy.yaml", "--show-only", charttest.ParamsTemplate, "mode=dra")
	if kinds := charttest.InstallPolicies(ctx, t, cs, policy); kinds["ValidatingAdmissionPolicy"] != 1 || kinds["ValidatingAdmissionPolicyBinding"] != 1 {
		t.Fatalf("rendered kinds %v", kinds)
	}
	nodes := map[string]*corev1.Node{}
	for _, name := range []string{"node-a", "node-b"} {
		n, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		nodes[name] = n
	}
	a := driverClient(ctx, t, c, cs, sa, "node-a")
	// What the admin (the kubelet, another driver) has: node B's slice of
	// ours, node A's slice of another driver.
	bSlice := mustCreateSlice(ctx, t, cs, slice("b-ours", "node-b", inject.Driver))
	aOther := mustCreateSlice(ctx, t, cs, slice("a-gpu", "node-a", "gpu.example.com"))
	eventuallyPolicy(ctx, t, func() error {
		_, err := a.ResourceV1().ResourceSlices().Create(ctx, slice("probe", "node-b", inject.Driver), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err == nil {
			return errString("node B's slice not refused yet")
		}
		return nil
	})

	// The real publisher of lpu-dra, with node A's token: its pool lands.
	ctrl, err := resourceslice.StartController(context.WithoutCancel(ctx), resourceslice.Options{
		DriverName: inject.Driver, KubeClient: a,
		Owner: &resourceslice.Owner{APIVersion: "v1", Kind: "Node", Name: "node-a", UID: nodes["node-a"].UID},
		Resources: &resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{"node-a": {
			Slices: []resourceslice.Slice{{Devices: []resourcev1.Device{{Name: "ring0-start0-size1"}}}}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ctrl.Stop)
	poll(ctx, t, "node A's pool published with node A's token", func() error {
		l, err := cs.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=node-a"})
		if err != nil {
			return err
		}
		for _, s := range l.Items {
			if s.Spec.Driver == inject.Driver {
				return nil
			}
		}
		return errString("not yet")
	})

	refused := func(what string, err error) {
		t.Helper()
		if err == nil {
			t.Errorf("%s: allowed", what)
			return
		}
		t.Logf("%s: refused: %v", what, err)
	}
	rs := a.ResourceV1().ResourceSlices()
	_, err = rs.Create(ctx, slice("a-makes-b", "node-b", inject.Driver), metav1.CreateOptions{})
	wantRefusalNoFatal(t, "create node B's slice", err, msgNodeSlices)
	_, err = rs.Create(ctx, slice("a-makes-gpu", "node-a", "gpu.example.com"), metav1.CreateOptions{})
	wantRefusalNoFatal(t, "create another driver's slice on node A", err, msgNodeSlices)
	for _, s := range []*resourcev1.ResourceSlice{bSlice, aOther} {
		cur, err := cs.ResourceV1().ResourceSlices().Get(ctx, s.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cur.Spec.Devices = append(cur.Spec.Devices, resourcev1.Device{Name: "extra"})
		_, err = rs.Update(ctx, cur, metav1.UpdateOptions{})
		wantRefusalNoFatal(t, "update "+s.Name, err, msgNodeSlices)
		wantRefusalNoFatal(t, "delete "+s.Name, rs.Delete(ctx, s.Name, metav1.DeleteOptions{}), msgNodeSlices)
	}
	// Moving a slice of its own to node B, or taking node B's for node A
	// (v1.37 validation also keeps spec.nodeName immutable).
	own := mustCreateSlice(ctx, t, a, slice("a-own", "node-a", inject.Driver))
	own.Spec.NodeName = new("node-b")
	_, err = rs.Update(ctx, own, metav1.UpdateOptions{})
	wantRefusalNoFatal(t, "move its own slice to node B", err, msgNodeSlices+"|field is immutable")
	taken, _ := cs.ResourceV1().ResourceSlices().Get(ctx, bSlice.Name, metav1.GetOptions{})
	taken.Spec.NodeName = new("node-a")
	_, err = rs.Update(ctx, taken, metav1.UpdateOptions{})
	wantRefusalNoFatal(t, "take node B's slice for node A", err, msgNodeSlices+"|field is immutable")
	refused("deletecollection", rs.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}))
	if err := rs.Delete(ctx, own.Name, metav1.DeleteOptions{}); err != nil {
		t.Errorf("delete its own slice: %v", err)
	}
	for _, s := range []string{bSlice.Name, aOther.Name} {
		if _, err := cs.ResourceV1().ResourceSlices().Get(ctx, s, metav1.GetOptions{}); err != nil {
			t.Errorf("slice %s is gone: %v", s, err)
		}
	}

	// A token of the same service account bound to no pod names no node.
	tok, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, sa, &authnv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	unbound := kubernetes.NewForConfigOrDie(tokenConfig(c, tok.Status.Token))
	_, err = unbound.ResourceV1().ResourceSlices().Create(ctx, slice("unbound", "node-a", inject.Driver), metav1.CreateOptions{})
	wantRefusalNoFatal(t, "a token bound to no pod", err, "names no node")
}

// driverClient is a client with the token the kubelet would give lpu-dra's
// pod on node: a service-account token bound to a pod bound to node.
func driverClient(ctx context.Context, t *testing.T, c *clustertest.Cluster, cs kubernetes.Interface, sa, node string) kubernetes.Interface {
	t.Helper()
	p, err := cs.CoreV1().Pods(namespace).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "lpu-dra-" + node, Namespace: namespace},
		Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: sa, AutomountServiceAccountToken: new(false),
			Containers: []corev1.Container{{Name: "lpu-dra", Image: "lpu-node"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, sa, &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{
		BoundObjectRef: &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.Name, UID: p.UID}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return kubernetes.NewForConfigOrDie(tokenConfig(c, tok.Status.Token))
}

func tokenConfig(c *clustertest.Cluster, token string) *rest.Config {
	return &rest.Config{Host: c.Server, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAFile: c.CAFile}}
}

func slice(name, node, driver string) *resourcev1.ResourceSlice {
	return &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: resourcev1.ResourceSliceSpec{
		Driver: driver, NodeName: new(node), Pool: resourcev1.ResourcePool{Name: node, ResourceSliceCount: 1},
		Devices: []resourcev1.Device{{Name: "dev0"}}}}
}

func mustCreateSlice(ctx context.Context, t *testing.T, cs kubernetes.Interface, s *resourcev1.ResourceSlice) *resourcev1.ResourceSlice {
	t.Helper()
	out, err := cs.ResourceV1().ResourceSlices().Create(ctx, s, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create slice %s: %v", s.Name, err)
	}
	return out
}

// wantRefusalNoFatal is wantRefusal ("a|b": either) that goes on to the
// next case.
func wantRefusalNoFatal(t *testing.T, what string, err error, want string) {
	t.Helper()
	if err == nil || !slices.ContainsFunc(strings.Split(want, "|"), func(w string) bool { return strings.Contains(err.Error(), w) }) {
		t.Errorf("%s: %v, want a refusal containing %q", what, err, want)
		return
	}
	t.Logf("%s: refused as it must: %v", what, err)
}

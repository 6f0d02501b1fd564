package driver

import (
	"context"
	"os"
	"regexp"
	"slices"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"sigs.k8s.io/yaml"

	"github.com/hyperaccel/lpu-node/cmd/lpu-dra/internal/statuswriter"
	"github.com/hyperaccel/lpu-node/internal/clustertest"
	"github.com/hyperaccel/lpu-node/internal/daemontest"
	"github.com/hyperaccel/lpu-node/internal/health/healthtest"
	"github.com/hyperaccel/lpu-node/pkg/claimstatus"
	"github.com/hyperaccel/lpu-node/pkg/inject"
)

const chartManifests = "../../../../deploy/manifests/lpu-node-dra.yaml"

// chartRBAC creates the rendered chart's lpu-dra ServiceAccount,
// ClusterRole and ClusterRoleBinding, and returns the ServiceAccount.
func chartRBAC(t *testing.T, admin kubernetes.Interface) *corev1.ServiceAccount {
	t.Helper()
	data, err := os.ReadFile(chartManifests)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var sa *corev1.ServiceAccount
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(data), -1) {
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
			t.Fatal(err)
		}
		switch tm.Kind {
		case "ServiceAccount":
			var o corev1.ServiceAccount
			mustUnmarshal(t, doc, &o)
			if o.Name == "lpu-node-dra" {
				if sa, err = admin.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, &o, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
		case "ClusterRole":
			var o rbacv1.ClusterRole
			mustUnmarshal(t, doc, &o)
			if o.Name == "lpu-node-dra" {
				if _, err := admin.RbacV1().ClusterRoles().Create(ctx, &o, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
		case "ClusterRoleBinding":
			var o rbacv1.ClusterRoleBinding
			mustUnmarshal(t, doc, &o)
			if o.Name == "lpu-node-dra" {
				if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, &o, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if sa == nil {
		t.Fatalf("%s has no lpu-node-dra ServiceAccount", chartManifests)
	}
	return sa
}

func mustUnmarshal(t *testing.T, doc string, o any) {
	t.Helper()
	if err := yaml.UnmarshalStrict([]byte(doc), o); err != nil {
		t.Fatal(err)
	}
}

// podIdentity runs a pod of sa on the node (no kubelet: bound by nodeName)
// and returns a client with the token the kubelet would mount into it,
// bound to the pod and so to its node.
func podIdentity(t *testing.T, c *clustertest.Cluster, admin kubernetes.Interface, sa *corev1.ServiceAccount) kubernetes.Interface {
	t.Helper()
	ctx := context.Background()
	pod, err := admin.CoreV1().Pods(sa.Namespace).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "lpu-dra-" + node, Namespace: sa.Namespace},
		Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: sa.Name,
			Containers: []corev1.Container{{Name: "lpu-dra", Image: "lpu-dra:test"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := admin.CoreV1().ServiceAccounts(sa.Namespace).CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{BoundObjectRef: &authenticationv1.BoundObjectReference{
			Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(&rest.Config{Host: c.Server, BearerToken: tr.Status.Token,
		TLSClientConfig: rest.TLSClientConfig{CAFile: c.CAFile}})
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// allocatedClaim creates a claim and allocates it as the scheduler would:
// the devices in this node's pool, the node selector naming node on.
func allocatedClaim(t *testing.T, admin kubernetes.Interface, name, on string, devices ...string) *resourceapi.ResourceClaim {
	t.Helper()
	ctx := context.Background()
	c, err := admin.ResourceV1().ResourceClaims("default").Create(ctx, &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{
			{Name: "lpus", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: inject.Driver}}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	alloc := &resourceapi.AllocationResult{NodeSelector: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
		MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{on}}}}}}}
	for _, d := range devices {
		alloc.Devices.Results = append(alloc.Devices.Results, resourceapi.DeviceRequestAllocationResult{Request: "lpus", Driver: inject.Driver, Pool: node, Device: d})
	}
	c.Status.Allocation = alloc
	if c, err = admin.ResourceV1().ResourceClaims("default").UpdateStatus(ctx, c, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	return c
}

// statusOf polls the claim until cond holds for its status.devices.
func statusOf(t *testing.T, admin kubernetes.Interface, name string, timeout time.Duration, cond func([]resourceapi.AllocatedDeviceStatus) bool) ([]resourceapi.AllocatedDeviceStatus, time.Duration) {
	t.Helper()
	start := time.Now()
	for {
		c, err := admin.ResourceV1().ResourceClaims("default").Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if cond(c.Status.Devices) {
			return c.Status.Devices, time.Since(start)
		}
		if time.Since(start) > timeout {
			t.Fatalf("claim %s: status.devices %+v after %v", name, c.Status.Devices, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// With the chart's RBAC and the token of its pod on the node, lpu-dra
// publishes its slices and, after Prepare, the claim's status.devices
// carries each arc's LPUs in ring order and device nodes; Unprepare
// removes them. A claim allocated on another node is refused by the API
// server (associated-node), and the writer drops it instead of retrying.
func TestClaimStatusInAPIServer(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{})
	admin, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if _, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	client := podIdentity(t, c, admin, chartRBAC(t, admin))

	e := newEnv(t, healthtest.New(t, healthtest.Ring(8)))
	w := statuswriter.New(client, statuswriter.Options{Attempts: 3, FirstBackoff: 20 * time.Millisecond, Logger: daemontest.Logger(t)})
	plugin := e.d.WithStatus(w)
	dir := daemontest.ShortDir(t)
	h, err := kubeletplugin.Start(ctx, plugin, kubeletplugin.DriverName(inject.Driver), kubeletplugin.KubeClient(client),
		kubeletplugin.NodeName(node), kubeletplugin.RegistrarDirectoryPath(dir), kubeletplugin.PluginDataDirectoryPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = e.d.RunPublisher(ctx, h) }()
	wdone := make(chan struct{})
	go func() { defer close(wdone); w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; <-wdone; h.Stop() })
	l := &live{e: e, client: admin}
	l.waitFor(t, 30*time.Second, func(d []resourceapi.Device, _ int) bool { return firstOfSize(d, 4) == "ring0-start0-size4" })

	claim := allocatedClaim(t, admin, "claim-a", node, "ring0-start7-size2", "ring0-start2-size1")
	start := time.Now()
	res, err := plugin.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{claim})
	if err != nil || res[claim.UID].Err != nil {
		t.Fatalf("Prepare: %v %v", err, res[claim.UID].Err)
	}
	prepared := time.Since(start)
	devs, took := statusOf(t, admin, claim.Name, 10*time.Second, func(d []resourceapi.AllocatedDeviceStatus) bool { return len(d) == 2 })
	t.Logf("Prepare returned after %v; status.devices in the API server %v later", prepared, took)
	want := map[string][]string{"ring0-start7-size2": {"lpu7", "lpu0"}, "ring0-start2-size1": {"lpu2"}}
	for _, d := range devs {
		if d.Driver != inject.Driver || d.Pool != node || d.Data == nil {
			t.Fatalf("entry %+v", d)
		}
		data, err := claimstatus.Parse(d.Data.Raw)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(data.LPUs, want[d.Device]) || len(data.DeviceNodes) != len(data.LPUs) || data.DeviceNodes[0] != "/dev/"+data.LPUs[0] {
			t.Errorf("%s: %+v, want LPUs %v", d.Device, data, want[d.Device])
		}
	}

	// Allocated on another node: this node's token may not write it.
	other := allocatedClaim(t, admin, "claim-b", "node-b", "ring0-start4-size2")
	if res, _ := plugin.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{other}); res[other.UID].Err != nil {
		t.Fatal(res[other.UID].Err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for w.Dropped() != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("write to a claim of another node not refused: dropped %d written %d", w.Dropped(), w.Written())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got, _ := admin.ResourceV1().ResourceClaims("default").Get(ctx, other.Name, metav1.GetOptions{}); len(got.Status.Devices) != 0 {
		t.Fatalf("claim of another node got status %+v", got.Status.Devices)
	}

	if res, err := plugin.UnprepareResourceClaims(ctx, []kubeletplugin.NamespacedObject{
		{NamespacedName: types.NamespacedName{Namespace: "default", Name: claim.Name}, UID: claim.UID}}); err != nil || res[claim.UID] != nil {
		t.Fatalf("Unprepare: %v %v", err, res[claim.UID])
	}
	statusOf(t, admin, claim.Name, 10*time.Second, func(d []resourceapi.AllocatedDeviceStatus) bool { return len(d) == 0 })
}

// The API server stopping does not make Prepare fail or wait.
func TestPrepareWithAPIServerGone(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{})
	admin, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	claim := allocatedClaim(t, admin, "claim-a", node, "ring0-start0-size4")
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, healthtest.New(t, healthtest.Ring(8)))
	w := statuswriter.New(admin, statuswriter.Options{Attempts: 2, FirstBackoff: 10 * time.Millisecond, Timeout: time.Second, Logger: daemontest.Logger(t)})
	ctx, cancel := context.WithCancel(context.Background())
	wdone := make(chan struct{})
	go func() { defer close(wdone); w.Run(ctx) }()
	defer func() { cancel(); <-wdone }()
	start := time.Now()
	res, err := e.d.WithStatus(w).PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{claim})
	if took := time.Since(start); err != nil || res[claim.UID].Err != nil || took > 500*time.Millisecond {
		t.Fatalf("Prepare with the API server gone: %v %v after %v", err, res[claim.UID].Err, took)
	}
	deadline := time.Now().Add(10 * time.Second)
	for w.Dropped() != 1 {
		if time.Now().After(deadline) {
			t.Fatal("writer did not give up")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

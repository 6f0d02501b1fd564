package driver

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/hyperaccel/lpu-node/cmd/lpu-dra/internal/state"
	"github.com/hyperaccel/lpu-node/internal/clustertest"
	"github.com/hyperaccel/lpu-node/internal/daemontest"
	"github.com/hyperaccel/lpu-node/internal/health/healthtest"
	"github.com/hyperaccel/lpu-node/pkg/inject"
)

// chartClasses creates the rendered chart's DeviceClasses.
func chartClasses(t *testing.T, admin kubernetes.Interface) {
	t.Helper()
	data, err := os.ReadFile(chartManifests)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(data), -1) {
		if !strings.Contains(doc, "\nkind: DeviceClass\n") {
			continue
		}
		var dc resourceapi.DeviceClass
		mustUnmarshal(t, doc, &dc)
		if _, err := admin.ResourceV1().DeviceClasses().Create(context.Background(), &dc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n < 2 {
		t.Fatalf("%s: %d device classes", chartManifests, n)
	}
}

// claimPod creates a claim with request r and a pod using it.
func claimPod(t *testing.T, admin kubernetes.Interface, name string, r resourceapi.ExactDeviceRequest) {
	t.Helper()
	ctx := context.Background()
	r.AllocationMode = resourceapi.DeviceAllocationModeExactCount
	if r.Count == 0 {
		r.Count = 1
	}
	if _, err := admin.ResourceV1().ResourceClaims("default").Create(ctx, &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec:       resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "lpus", Exactly: &r}}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	claimName := name
	if _, err := admin.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{
			// The apiserver taints a new Node not-ready (no kubelet here):
			// only the claim may keep the pod from scheduling.
			Tolerations:    []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			ResourceClaims: []corev1.PodResourceClaim{{Name: "lpus", ResourceClaimName: &claimName}},
			Containers: []corev1.Container{{Name: "c", Image: "busybox",
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "lpus"}}}}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// A claim for more LPUs than any ring holds stays Pending with the real
// v1.37.2 scheduler's reason, unallocated, so the kubelet never calls
// Prepare and lpu-dra has nothing to refuse (no error loop). A claim that
// fits on the same node is allocated, so the node and its slices are fine.
func TestOversizeClaimStaysPending(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{Scheduler: true})
	admin, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	n, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Status.Capacity = corev1.ResourceList{corev1.ResourcePods: resource.MustParse("110"), corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("16Gi")}
	n.Status.Allocatable = n.Status.Capacity
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now()}}
	if _, err := admin.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	chartClasses(t, admin)

	e := newEnv(t, healthtest.New(t, healthtest.Ring(8)))
	dir := daemontest.ShortDir(t)
	h, err := kubeletplugin.Start(ctx, e.d, kubeletplugin.DriverName(inject.Driver), kubeletplugin.KubeClient(admin),
		kubeletplugin.NodeName(node), kubeletplugin.RegistrarDirectoryPath(dir), kubeletplugin.PluginDataDirectoryPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = e.d.RunPublisher(ctx, h) }()
	t.Cleanup(func() { cancel(); <-done; h.Stop() })
	(&live{e: e, client: admin}).waitFor(t, 30*time.Second, func(d []resourceapi.Device, _ int) bool { return firstOfSize(d, 8) != "" })

	claimPod(t, admin, "fits", resourceapi.ExactDeviceRequest{DeviceClassName: "lpu-arc-8.hyperaccel.ai"})
	claimPod(t, admin, "arc-16", resourceapi.ExactDeviceRequest{DeviceClassName: inject.Driver,
		Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.attributes["lpu.hyperaccel.ai"].size == 16`}}}})
	claimPod(t, admin, "singles-16", resourceapi.ExactDeviceRequest{DeviceClassName: "lpu-arc-1.hyperaccel.ai", Count: 16})

	waitPod(t, admin, "fits", func(p *corev1.Pod) bool { return p.Spec.NodeName == node })
	for _, name := range []string{"arc-16", "singles-16"} {
		p := waitPod(t, admin, name, func(p *corev1.Pod) bool { return unschedulable(p) != "" })
		t.Logf("%s: %s", name, unschedulable(p))
		if msg := unschedulable(p); !strings.Contains(msg, "cannot allocate all claims") {
			t.Errorf("%s: scheduler says %q, want it to name the claims", name, msg)
		}
	}
	time.Sleep(2 * time.Second) // the scheduler retries; it must keep failing
	for _, name := range []string{"arc-16", "singles-16"} {
		p, err := admin.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cl, err := admin.ResourceV1().ResourceClaims("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Spec.NodeName != "" || cl.Status.Allocation != nil || unschedulable(p) == "" {
			t.Errorf("%s: bound to %q, allocation %+v", name, p.Spec.NodeName, cl.Status.Allocation)
		}
	}
	if got := counter(t, e.metrics, MetricRefusals, state.ReasonBadDevice); got != 0 || len(e.d.Prepared()) != 0 {
		t.Errorf("driver saw the claims: %v refusals, %d prepared", got, len(e.d.Prepared()))
	}
}

// unschedulable is the scheduler's message when it marked the pod
// unschedulable, else "".
func unschedulable(p *corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return c.Message
		}
	}
	return ""
}

func waitPod(t *testing.T, admin kubernetes.Interface, name string, cond func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		p, err := admin.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if cond(p) {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s: %+v", name, p.Status)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

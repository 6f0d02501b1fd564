package reservations

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/hyperaccel/lpu-node/cmd/lpu-dra/internal/driver"
	"github.com/hyperaccel/lpu-node/internal/clustertest"
	"github.com/hyperaccel/lpu-node/internal/daemontest"
	checkpoint "github.com/hyperaccel/lpu-node/internal/dracheckpoint"
	"github.com/hyperaccel/lpu-node/internal/health/healthtest"
	"github.com/hyperaccel/lpu-node/pkg/inject"
)

const node = "node-a"

type fixture struct {
	t        *testing.T
	cluster  *clustertest.Cluster
	client   kubernetes.Interface
	drv      *driver.Driver
	metrics  *driver.Metrics
	stateDir string
}

// counter is the value of the driver's counter name.
func (f *fixture) counter(name string) float64 {
	f.t.Helper()
	mfs, err := f.metrics.Registry.Gather()
	if err != nil {
		f.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	f.t.Fatalf("no counter %s", name)
	return 0
}

// pod creates a pod naming claim shared, bound to the node unless unbound.
func (f *fixture) pod(name string, unbound ...bool) *corev1.Pod {
	f.t.Helper()
	nodeName := node
	if len(unbound) > 0 && unbound[0] {
		nodeName = ""
	}
	p, err := f.client.CoreV1().Pods("default").Create(context.Background(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: "c", Image: "app",
			Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "lpus"}}}}},
			ResourceClaims: []corev1.PodResourceClaim{{Name: "lpus", ResourceClaimName: new("shared")}}},
	}, metav1.CreateOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return p
}

// bind binds p to the node, as the scheduler does after reserving.
func (f *fixture) bind(p *corev1.Pod) {
	f.t.Helper()
	err := f.client.CoreV1().Pods("default").Bind(context.Background(), &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, UID: p.UID}, Target: corev1.ObjectReference{Kind: "Node", Name: node}}, metav1.CreateOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
}

// reserve sets the claim's reservedFor to pods (allocating it first, to
// ring0-start0-size2).
func (f *fixture) reserve(pods ...*corev1.Pod) *resourceapi.ResourceClaim {
	f.t.Helper()
	return f.allocate("ring0-start0-size2", false, pods...)
}

// allocate allocates the claim to device (with adminAccess if admin) and
// reserves it for pods, deallocating it first when it was allocated to
// something else (as the scheduler does after the pods went).
func (f *fixture) allocate(device string, admin bool, pods ...*corev1.Pod) *resourceapi.ResourceClaim {
	f.t.Helper()
	ctx := context.Background()
	c, err := f.client.ResourceV1().ResourceClaims("default").Get(ctx, "shared", metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	want := resourceapi.DeviceRequestAllocationResult{Request: "lpus", Driver: inject.Driver, Pool: node, Device: device}
	if admin {
		want.AdminAccess = new(true)
	}
	if a := c.Status.Allocation; a != nil && (len(a.Devices.Results) != 1 || a.Devices.Results[0].Device != device || (a.Devices.Results[0].AdminAccess != nil) != admin) {
		c.Status.Allocation, c.Status.ReservedFor = nil, nil
		if c, err = f.client.ResourceV1().ResourceClaims("default").UpdateStatus(ctx, c, metav1.UpdateOptions{}); err != nil {
			f.t.Fatal(err)
		}
	}
	c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
		Results: []resourceapi.DeviceRequestAllocationResult{want}}}
	c.Status.ReservedFor = nil
	for _, p := range pods {
		c.Status.ReservedFor = append(c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: p.Name, UID: p.UID})
	}
	c, err = f.client.ResourceV1().ResourceClaims("default").UpdateStatus(ctx, c, metav1.UpdateOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return c
}

func (f *fixture) admitted(p *corev1.Pod, uid types.UID) error {
	_, err := checkpoint.PodLPUs(f.stateDir, string(p.UID), []string{string(uid)})
	return err
}

func startFixture(t *testing.T) *fixture {
	c := clustertest.Start(t, clustertest.Options{})
	client, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Nodes().Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// No controller manager runs: the ServiceAccount admission wants the
	// namespace's default account to exist.
	_, err = client.CoreV1().ServiceAccounts("default").Create(context.Background(),
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	stateDir := t.TempDir()
	m := driver.NewMetrics(node)
	drv, err := driver.New(healthtest.New(t, healthtest.Ring(8)), driver.Options{NodeName: node, StateDir: stateDir, CDIDir: filepath.Join(t.TempDir(), "cdi"), Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	_, err = client.ResourceV1().ResourceClaims("default").Create(context.Background(), &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "shared"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "lpus", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: inject.Driver}}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, cluster: c, client: client, drv: drv, metrics: m, stateDir: stateDir}
}

// Against the real v1.37.2 apiserver, with no periodic resync: a pod that
// joins a prepared claim is admitted once the scheduler reserved the claim
// for it and bound it, with no second Prepare; a pod the claim is not
// reserved for stays refused; a pod dropped from reservedFor and deleted is
// refused.
func TestReservedForIsTheSourceOfTruth(t *testing.T) {
	f, p1, claim := startPrepared(t)

	// The scheduler reserves the claim for a pod, then binds it.
	p2 := f.pod("p2", true)
	f.reserve(p1, p2)
	start := time.Now()
	f.bind(p2)
	daemontest.Eventually(t, 10*time.Second, "p2 admitted", func() bool { return f.admitted(p2, claim.UID) == nil })
	t.Logf("second pod admitted %v after it was bound", time.Since(start))

	p3 := f.pod("p3") // names the claim, never reserved
	time.Sleep(time.Second)
	if err := f.admitted(p3, claim.UID); !errors.Is(err, checkpoint.ErrNotReserved) {
		t.Fatalf("unreserved pod: %v, want ErrNotReserved", err)
	}

	f.reserve(p2)
	if err := f.client.CoreV1().Pods("default").Delete(context.Background(), "p1", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	daemontest.Eventually(t, 10*time.Second, "p1 refused", func() bool {
		return errors.Is(f.admitted(p1, claim.UID), checkpoint.ErrNotReserved)
	})
	if err := f.admitted(p2, claim.UID); err != nil {
		t.Fatal(err)
	}
}

// TestStalePreparationAdmitsNoPod is F2 of the fourth round, through the
// real watcher and the real v1.37.2 apiserver: the claim is deallocated
// and allocated again to other LPUs (or the same ones with adminAccess)
// while the driver keeps its preparation (a failed unprepare; the kubelet
// reuses it by claim UID alone). No pod of the re-allocated claim may be
// admitted on the stale preparation; once the allocation matches again,
// its pods are.
func TestStalePreparationAdmitsNoPod(t *testing.T) {
	f, p1, claim := startPrepared(t)
	// adminAccess allocations need the namespace's admin-access label.
	ns, err := f.client.CoreV1().Namespaces().Get(context.Background(), "default", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns.Labels = map[string]string{"resource.kubernetes.io/admin-access": "true"}
	if _, err := f.client.CoreV1().Namespaces().Update(context.Background(), ns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i, step := range []struct {
		device string
		admin  bool
	}{{"ring0-start4-size2", false}, {"ring0-start0-size2", true}} {
		// As the scheduler does: allocate and reserve, then bind (the pod
		// event the watcher follows, with no periodic resync).
		p := f.pod(fmt.Sprintf("new-%d", i), true)
		f.allocate(step.device, step.admin, p1, p)
		f.bind(p)
		// The watcher sees the claim change: the entry admits nobody,
		// not the new pod, and no longer the first one.
		daemontest.Eventually(t, 10*time.Second, "the stale preparation seen", func() bool {
			return f.counter(driver.MetricStale) >= float64(i+1)
		})
		if err := f.admitted(p1, claim.UID); !errors.Is(err, checkpoint.ErrNotReserved) {
			t.Fatalf("%s admin=%v: the first pod on a stale preparation: %v, want ErrNotReserved", step.device, step.admin, err)
		}
		if err := f.admitted(p, claim.UID); !errors.Is(err, checkpoint.ErrNotReserved) {
			t.Fatalf("%s admin=%v: a pod of the re-allocated claim on the stale preparation: %v, want ErrNotReserved", step.device, step.admin, err)
		}
	}
	// Allocated as prepared again: its pods are served.
	back := f.pod("back", true)
	f.allocate("ring0-start0-size2", false, p1, back)
	f.bind(back)
	daemontest.Eventually(t, 10*time.Second, "p1 and a new pod admitted again", func() bool {
		return f.admitted(p1, claim.UID) == nil && f.admitted(back, claim.UID) == nil
	})
}

// startPrepared is a fixture whose shared claim is reserved for and
// prepared with pod p1, admitted, and the watcher running without a
// periodic resync.
func startPrepared(t *testing.T) (*fixture, *corev1.Pod, *resourceapi.ResourceClaim) {
	f := startFixture(t)
	p1 := f.pod("p1")
	claim := f.reserve(p1)
	res, err := f.drv.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{claim})
	if err != nil || res[claim.UID].Err != nil {
		t.Fatalf("prepare: %v %v", err, res[claim.UID].Err)
	}
	f.run(t, Options{Resync: time.Hour, GoneRetry: 500 * time.Millisecond})
	if err := f.admitted(p1, claim.UID); err != nil {
		t.Fatal(err)
	}
	return f, p1, claim
}

// run runs the watcher on the fixture until the test ends.
func (f *fixture) run(t *testing.T, opts Options) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	opts.Client, opts.NodeName = f.client, node
	go func() { done <- Run(ctx, f.drv, opts) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
}

// A pod dropped from reservedFor without any pod event on the node is
// refused after the periodic resync; with the apiserver gone the resyncs
// fail, the recorded pod is still served and the others still refused.
func TestResyncAndUnreachableAPIServer(t *testing.T) {
	f := startFixture(t)
	p1, p2, p3 := f.pod("p1"), f.pod("p2"), f.pod("p3")
	claim := f.reserve(p1, p2)
	if res, _ := f.drv.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{claim}); res[claim.UID].Err != nil {
		t.Fatal(res[claim.UID].Err)
	}
	f.run(t, Options{Resync: 500 * time.Millisecond})
	f.reserve(p2)
	daemontest.Eventually(t, 10*time.Second, "p1 refused", func() bool {
		return errors.Is(f.admitted(p1, claim.UID), checkpoint.ErrNotReserved)
	})
	if err := f.cluster.Stop(); err != nil {
		t.Fatal(err)
	}
	for range 4 { // each period's GET fails against the stopped apiserver
		time.Sleep(500 * time.Millisecond)
		if err := f.admitted(p2, claim.UID); err != nil {
			t.Fatalf("known pod refused with the apiserver gone: %v", err)
		}
		for _, p := range []*corev1.Pod{p1, p3} {
			if err := f.admitted(p, claim.UID); !errors.Is(err, checkpoint.ErrNotReserved) {
				t.Fatalf("pod %s with the apiserver gone: %v, want ErrNotReserved", p.Name, err)
			}
		}
	}
}

func TestRunNeedsClientAndNode(t *testing.T) {
	if err := Run(context.Background(), nil, Options{}); err == nil {
		t.Fatal("Run without a client started")
	}
}

package tests_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	schedv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"sigs.k8s.io/yaml"

	"github.com/hyperaccel/lpu-node/deploy/charttest"
	"github.com/hyperaccel/lpu-node/internal/clustertest"
	"github.com/hyperaccel/lpu-node/pkg/arcslice"
	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/inject"
)

// gangExample is the chart's optional gang manifest (docs/dra.md, "Jobs
// that span servers").
const gangExample = chartDir + "/examples/gang-2x4.yaml"

// workloadGate is the feature gate of the Workload API and gang scheduling
// on v1.37 (beta, off by default).
const workloadGate = "--feature-gates=GenericWorkload=true"

// gangClusterOptions run the control plane as docs/dra.md tells an
// operator to for gangs: the gate on in the apiserver, scheduler and
// controller-manager, scheduling.k8s.io/v1beta1 served. Of the
// controllers only the ones a claim pod needs (claims from templates) and
// the PodGroup's own; nodes have no kubelet, so new nodes are not tainted
// not-ready.
var gangClusterOptions = clustertest.Options{Scheduler: true, ControllerManager: true,
	APIServerFlags: []string{workloadGate, "--runtime-config=scheduling.k8s.io/v1beta1=true",
		"--disable-admission-plugins=TaintNodesByCondition"},
	SchedulerFlags:         []string{workloadGate},
	ControllerManagerFlags: []string{workloadGate, "--controllers=resourceclaim-controller,podgroup-protection-controller"},
}

// gang is the example's objects, decoded strictly against the v1.37 types.
type gang struct {
	workload *schedv1beta1.Workload
	group    *schedv1beta1.PodGroup
	pods     []*corev1.Pod
}

// readGang decodes the example manifest; any field the v1.37 types do not
// have fails the test.
func readGang(t *testing.T) gang {
	t.Helper()
	b, err := os.ReadFile(gangExample)
	if err != nil {
		t.Fatal(err)
	}
	var g gang
	for i, tm := range charttest.Split(t, b) {
		doc := tm.Text
		var obj any
		switch tm.APIVersion + "/" + tm.Kind {
		case "scheduling.k8s.io/v1beta1/Workload":
			g.workload = &schedv1beta1.Workload{}
			obj = g.workload
		case "scheduling.k8s.io/v1beta1/PodGroup":
			g.group = &schedv1beta1.PodGroup{}
			obj = g.group
		case "v1/Pod":
			p := &corev1.Pod{}
			g.pods = append(g.pods, p)
			obj = p
		default:
			t.Fatalf("%s document %d: unexpected kind %s/%s", gangExample, i, tm.APIVersion, tm.Kind)
		}
		if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
			t.Fatalf("%s document %d (%s): strict decode: %v", gangExample, i, tm.Kind, err)
		}
	}
	if g.workload == nil || g.group == nil || len(g.pods) == 0 {
		t.Fatalf("%s: want a Workload, a PodGroup and pods, got %+v", gangExample, g)
	}
	return g
}

// variant is the example renamed with suffix, its pods on template.
func (g gang) variant(suffix, template string) gang {
	out := gang{workload: g.workload.DeepCopy(), group: g.group.DeepCopy()}
	out.workload.Name += "-" + suffix
	out.group.Name += "-" + suffix
	out.group.Spec.WorkloadRef.WorkloadName = out.workload.Name
	for _, p := range g.pods {
		p = p.DeepCopy()
		p.Name += "-" + suffix
		p.Spec.SchedulingGroup.PodGroupName = &out.group.Name
		p.Spec.ResourceClaims[0].ResourceClaimTemplateName = &template
		out.pods = append(out.pods, p)
	}
	return out
}

// apply creates the gang's objects as `kubectl apply -f` would, in file
// order.
func (g gang) apply(ctx context.Context, t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	if _, err := cs.SchedulingV1beta1().Workloads(g.workload.Namespace).Create(ctx, g.workload, metav1.CreateOptions{}); err != nil {
		t.Fatalf("Workload %s refused: %v", g.workload.Name, err)
	}
	if _, err := cs.SchedulingV1beta1().PodGroups(g.group.Namespace).Create(ctx, g.group, metav1.CreateOptions{}); err != nil {
		t.Fatalf("PodGroup %s refused: %v", g.group.Name, err)
	}
	for _, p := range g.pods {
		got, err := cs.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("pod %s refused: %v", p.Name, err)
		}
		// Without the gate the apiserver drops the field silently.
		if got.Spec.SchedulingGroup == nil || *got.Spec.SchedulingGroup.PodGroupName != g.group.Name {
			t.Fatalf("pod %s stored without its schedulingGroup: %+v", p.Name, got.Spec.SchedulingGroup)
		}
	}
}

// TestGangExample applies the chart's gang example to a real v1.37.2
// control plane with the Workload API on, with one lpu-dra node (a ring of
// 8, the chart's arc sizes): both pods are bound, each on its own 4-arc,
// and the PodGroup says it was scheduled. Then, with a second empty node,
// the same gang on 8-arcs (one fits, two do not) stays wholly Pending with
// no claim allocated and the PodGroup says Unschedulable, a gang whose
// minCount exceeds its pods is never tried and holds nothing, and the same
// two pods without a group take the ring one of them can have: the
// partial hold the gang prevents. Last, the PodGroup outlives a delete
// while its pods run.
func TestGangExample(t *testing.T) {
	helm := charttest.Helm(t)
	ex := readGang(t)
	c := clustertest.Start(t, gangClusterOptions)
	cs := kubernetes.NewForConfigOrDie(c.Config)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	makeNamespaces(ctx, t, cs, map[string]map[string]string{ex.group.Namespace: nil})
	dra := decodeDRA(t, charttest.Render(t, helm, "--show-only", "templates/dra-classes.yaml", "mode=dra"))
	installClasses(ctx, t, cs, dra)
	lpuNode(ctx, t, cs, "lpu-0")

	ex.apply(ctx, t, cs)
	devs := waitBound(ctx, t, cs, ex.pods)
	checkDisjointArcs(t, devs, 4)
	waitGroupCondition(ctx, t, cs, ex.group, metav1.ConditionTrue, "")

	lpuNode(ctx, t, cs, "lpu-1")
	// A PodGroup asking for more pods than it has: never tried.
	short := ex.variant("short", "lpu-arc-4")
	short.group.Spec.SchedulingPolicy.Gang.MinCount = int32(len(short.pods) + 1)
	short.workload.Spec.PodGroupTemplates[0].SchedulingPolicy.Gang.MinCount = short.group.Spec.SchedulingPolicy.Gang.MinCount
	short.apply(ctx, t, cs)
	big := ex.variant("big", "lpu-arc-8")
	big.apply(ctx, t, cs)
	waitGroupCondition(ctx, t, cs, big.group, metav1.ConditionFalse, schedv1beta1.PodGroupReasonUnschedulable)
	for _, p := range append(big.pods, short.pods...) {
		got, err := cs.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Spec.NodeName != "" {
			t.Errorf("pod %s of the unfit gang bound to %s", p.Name, got.Spec.NodeName)
		}
	}
	if held := allocatedClaims(ctx, t, cs, append(big.pods, short.pods...)); len(held) > 0 {
		t.Errorf("an unfit gang holds LPUs: %v", held)
	}
	if got, err := cs.SchedulingV1beta1().PodGroups(short.group.Namespace).Get(ctx, short.group.Name, metav1.GetOptions{}); err != nil ||
		meta.FindStatusCondition(got.Status.Conditions, schedv1beta1.PodGroupInitiallyScheduled) != nil {
		t.Errorf("PodGroup short of pods was tried: %v %+v", err, got.Status.Conditions)
	}

	// The control: without the group the first 8-arc pod binds and holds
	// lpu-1's ring while its sibling waits.
	var solo []*corev1.Pod
	for _, p := range big.pods {
		p = p.DeepCopy()
		p.Name, p.ResourceVersion, p.Spec.SchedulingGroup = strings.Replace(p.Name, "-big", "-solo", 1), "", nil
		if _, err := cs.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		solo = append(solo, p)
	}
	waitPartial(ctx, t, cs, solo)
	checkGroupProtection(ctx, t, cs, ex)
}

// checkGroupProtection deletes the example's PodGroup while its pods run:
// it stays, Terminating with the PodGroupProtection finalizer, until the
// pods are gone, then the controller-manager lets it go.
func checkGroupProtection(ctx context.Context, t *testing.T, cs kubernetes.Interface, g gang) {
	t.Helper()
	pgs := cs.SchedulingV1beta1().PodGroups(g.group.Namespace)
	if err := pgs.Delete(ctx, g.group.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := pgs.Get(ctx, g.group.Name, metav1.GetOptions{})
	if err != nil || got.DeletionTimestamp == nil || strings.Join(got.Finalizers, ",") != "scheduling.k8s.io/podgroup-protection" {
		t.Fatalf("PodGroup deleted under its running pods: %v, finalizers %v", err, got.Finalizers)
	}
	zero := int64(0)
	for _, p := range g.pods {
		if err := cs.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			t.Fatal(err)
		}
	}
	poll(ctx, t, "PodGroup gone after its pods", func() error {
		if _, err := pgs.Get(ctx, g.group.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("PodGroup %s still there (%v)", g.group.Name, err)
		}
		return nil
	})
}

// installClasses creates the chart's DeviceClasses and claim templates.
func installClasses(ctx context.Context, t *testing.T, cs kubernetes.Interface, dra draObjects) {
	t.Helper()
	for _, dc := range dra.DeviceClasses {
		if _, err := cs.ResourceV1().DeviceClasses().Create(ctx, dc, metav1.CreateOptions{}); err != nil {
			t.Fatalf("DeviceClass %s: %v", dc.Name, err)
		}
	}
	for _, rct := range dra.ClaimTemplates {
		if _, err := cs.ResourceV1().ResourceClaimTemplates(rct.Namespace).Create(ctx, rct, metav1.CreateOptions{}); err != nil {
			t.Fatalf("ResourceClaimTemplate %s/%s: %v", rct.Namespace, rct.Name, err)
		}
	}
}

// lpuNode registers a Ready node with one ring of 8 LPUs and publishes its
// arcs of the chart's sizes as lpu-dra's kubelet plugin helper does (the
// resourceslice controller, the node as owner), until the test ends.
func lpuNode(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string) {
	t.Helper()
	inv := &device.Inventory{DriverVersion: "1.0.0"}
	var ring []string
	for i := 0; i < 8; i++ {
		inv.Devices = append(inv.Devices, device.Device{ID: device.ID(i), Index: i, Path: "/dev/" + device.ID(i),
			Model: "LPU", Health: device.Health{Healthy: true}})
		ring = append(ring, device.ID(i))
	}
	inv.Rings = [][]string{ring}
	b, err := arcslice.NewBuilder(inv, arcslice.Options{Sizes: []int{1, 2, 4, 8}})
	if err != nil {
		t.Fatal(err)
	}
	n := readyNode(ctx, t, cs, name, nil)
	ctrl, err := resourceslice.StartController(context.WithoutCancel(ctx), resourceslice.Options{
		DriverName: inject.Driver, KubeClient: cs,
		Owner:     &resourceslice.Owner{APIVersion: "v1", Kind: "Node", Name: name, UID: n.UID},
		Resources: &resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{name: {Slices: b.Slices(nil, nil)}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ctrl.Stop)
	want := len(b.Slices(nil, nil))
	poll(ctx, t, "slices of "+name, func() error {
		l, err := cs.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + name})
		if err != nil || len(l.Items) != want {
			return fmt.Errorf("%d of %d slices (%v)", len(l.Items), want, err)
		}
		return nil
	})
}

// poll runs check every 250 ms until it passes; the test fails when ctx
// ends first, with check's last error.
func poll(ctx context.Context, t *testing.T, what string, check func() error) {
	t.Helper()
	for {
		err := check()
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: %v", what, err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// podClaim is the allocated claim of a pod's first resource claim, nil
// while the pod has none or it is not allocated.
func podClaim(ctx context.Context, cs kubernetes.Interface, p *corev1.Pod) (*resourcev1.ResourceClaim, error) {
	got, err := cs.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	if len(got.Status.ResourceClaimStatuses) == 0 || got.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
		return nil, nil
	}
	c, err := cs.ResourceV1().ResourceClaims(p.Namespace).Get(ctx, *got.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
	if err != nil || c.Status.Allocation == nil {
		return nil, err
	}
	return c, nil
}

// waitBound waits until every pod is bound with its claim allocated and
// returns each pod's node/device.
func waitBound(ctx context.Context, t *testing.T, cs kubernetes.Interface, pods []*corev1.Pod) map[string]string {
	t.Helper()
	devs := map[string]string{}
	poll(ctx, t, "gang bound", func() error {
		for _, p := range pods {
			got, err := cs.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
			if err != nil || got.Spec.NodeName == "" {
				return fmt.Errorf("pod %s not bound (%v)", p.Name, err)
			}
			c, err := podClaim(ctx, cs, p)
			if err != nil || c == nil || len(c.Status.Allocation.Devices.Results) != 1 {
				return fmt.Errorf("pod %s: claim not allocated one device (%v)", p.Name, err)
			}
			r := c.Status.Allocation.Devices.Results[0]
			if r.Pool != got.Spec.NodeName {
				return fmt.Errorf("pod %s on %s got a device of %s", p.Name, got.Spec.NodeName, r.Pool)
			}
			devs[p.Name] = r.Pool + "/" + r.Device
		}
		return nil
	})
	return devs
}

// checkDisjointArcs fails unless every device is a k-arc and no two on one
// node share an LPU.
func checkDisjointArcs(t *testing.T, devs map[string]string, k int) {
	t.Helper()
	taken := map[string]string{} // node/ring/position → pod
	for pod, d := range devs {
		node, name, _ := strings.Cut(d, "/")
		a, err := arcslice.ParseDeviceName(name)
		if err != nil || a.Size != k {
			t.Errorf("pod %s got %s, want a %d-arc (%v)", pod, d, k, err)
			continue
		}
		for i := 0; i < a.Size; i++ {
			key := fmt.Sprintf("%s/%d/%d", node, a.Ring, (a.Start+i)%8)
			if other, ok := taken[key]; ok {
				t.Errorf("pods %s and %s share LPU %s", pod, other, key)
			}
			taken[key] = pod
		}
	}
}

// waitGroupCondition waits for the scheduler's PodGroupInitiallyScheduled
// condition on the group with status (and reason, when not empty).
func waitGroupCondition(ctx context.Context, t *testing.T, cs kubernetes.Interface, g *schedv1beta1.PodGroup, status metav1.ConditionStatus, reason string) {
	t.Helper()
	poll(ctx, t, "PodGroup "+g.Name, func() error {
		got, err := cs.SchedulingV1beta1().PodGroups(g.Namespace).Get(ctx, g.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		c := meta.FindStatusCondition(got.Status.Conditions, schedv1beta1.PodGroupInitiallyScheduled)
		if c == nil || c.Status != status || (reason != "" && c.Reason != reason) {
			return fmt.Errorf("condition %+v, want %s %s", c, status, reason)
		}
		return nil
	})
}

// allocatedClaims are the pods whose claim is allocated.
func allocatedClaims(ctx context.Context, t *testing.T, cs kubernetes.Interface, pods []*corev1.Pod) []string {
	t.Helper()
	var held []string
	for _, p := range pods {
		c, err := podClaim(ctx, cs, p)
		if err != nil {
			t.Fatal(err)
		}
		if c != nil {
			held = append(held, p.Name+": "+c.Name)
		}
	}
	return held
}

// waitPartial waits until exactly one of two ungrouped pods is bound and
// its claim allocated, and checks the other stays unbound.
func waitPartial(ctx context.Context, t *testing.T, cs kubernetes.Interface, pods []*corev1.Pod) {
	t.Helper()
	poll(ctx, t, "ungrouped pods", func() error {
		if held := allocatedClaims(ctx, t, cs, pods); len(held) != 1 {
			return fmt.Errorf("%d of the ungrouped pods hold LPUs (%v), want 1", len(held), held)
		}
		return nil
	})
	for _, p := range pods {
		got, err := cs.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if c, _ := podClaim(ctx, cs, p); c == nil && got.Spec.NodeName != "" {
			t.Errorf("pod %s bound to %s without LPUs", p.Name, got.Spec.NodeName)
		}
	}
}

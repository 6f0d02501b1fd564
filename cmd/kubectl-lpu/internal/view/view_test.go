package view

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/hyperaccel/lpu-node/pkg/alloc"
	"github.com/hyperaccel/lpu-node/pkg/arcslice"
	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/inject"
)

// draNode returns the ResourceSlices lpu-dra publishes for a node of
// rings rings of 8, arcs of sizes (none: every arc).
func draNode(t *testing.T, name string, rings int, sizes ...int) []resourceapi.ResourceSlice {
	t.Helper()
	inv := &device.Inventory{}
	for r := 0; r < rings; r++ {
		var ring []string
		for p := 0; p < 8; p++ {
			i := r*8 + p
			inv.Devices = append(inv.Devices, device.Device{ID: device.ID(i), Index: i, Health: device.Health{Healthy: true}})
			ring = append(ring, device.ID(i))
		}
		inv.Rings = append(inv.Rings, ring)
	}
	b, err := arcslice.NewBuilder(inv, arcslice.Options{Sizes: sizes})
	if err != nil {
		t.Fatal(err)
	}
	built := b.Slices(nil, arcslice.Unhealthy(inv))
	var out []resourceapi.ResourceSlice
	for _, s := range built {
		out = append(out, resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{
			Driver: inject.Driver, Pool: resourceapi.ResourcePool{Name: name}, Devices: s.Devices, SharedCounters: s.SharedCounters}})
	}
	return out
}

func claim(name, pod, node string, arcs ...alloc.Arc) resourceapi.ResourceClaim {
	c := resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}}
	c.Status.Allocation = &resourceapi.AllocationResult{}
	for _, a := range arcs {
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results, resourceapi.DeviceRequestAllocationResult{
			Request: "lpus", Driver: inject.Driver, Pool: node, Device: arcslice.DeviceName(a)})
	}
	c.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: pod}}
	return c
}

func TestBuild(t *testing.T) {
	slices := append(draNode(t, "dra-a", 1), draNode(t, "dra-b", 2)...)
	claims := []resourceapi.ResourceClaim{
		claim("c1", "four", "dra-a", alloc.Arc{Ring: 0, Start: 6, Size: 4}),                                           // lpu6,7,0,1
		claim("c2", "singles", "dra-b", alloc.Arc{Ring: 1, Start: 0, Size: 1}, alloc.Arc{Ring: 1, Start: 2, Size: 1}), // scattered
		{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "pending"}},
	}
	lpus := func(n int64) corev1.ResourceList {
		return corev1.ResourceList{LPUResource: *resource.NewQuantity(n, resource.DecimalSI)}
	}
	nodes := []corev1.Node{
		{ObjectMeta: metav1.ObjectMeta{Name: "dra-a"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "dra-b"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "dp", Labels: map[string]string{"hyperaccel.ai/lpu.rings": "1"}}, Status: corev1.NodeStatus{Allocatable: lpus(8)}},
		{ObjectMeta: metav1.ObjectMeta{Name: "cpu-only"}},
	}
	pods := []corev1.Pod{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "three"}, Spec: corev1.PodSpec{NodeName: "dp", Containers: []corev1.Container{{Resources: corev1.ResourceRequirements{Limits: lpus(3)}}}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "done"}, Spec: corev1.PodSpec{NodeName: "dp", Containers: []corev1.Container{{Resources: corev1.ResourceRequirements{Limits: lpus(4)}}}},
			Status: corev1.PodStatus{Phase: corev1.PodSucceeded}},
	}
	c := Build(nodes, slices, claims, pods, nil)
	if len(c.Nodes) != 3 {
		t.Fatalf("%d LPU nodes, want 3 (cpu-only left out): %+v", len(c.Nodes), c.Nodes)
	}
	tests := map[string]struct {
		node          int
		mode          string
		free, largest int
		arcs          map[int]int
	}{
		"dra-a": {1, "dra", 4, 4, map[int]int{1: 4, 2: 2, 4: 1, 8: 0}},
		"dra-b": {2, "dra", 14, 8, map[int]int{1: 14, 2: 6, 4: 3, 8: 1}},
		"dp":    {0, "device-plugin", 5, -1, map[int]int{1: 5, 2: 2, 4: 1, 8: 0}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			n := c.Nodes[tc.node]
			if n.Name != name || n.Mode != tc.mode || n.Free != tc.free || n.LargestFreeArc != tc.largest {
				t.Fatalf("%+v, want mode %s free %d largest %d", n, tc.mode, tc.free, tc.largest)
			}
			for k, want := range tc.arcs {
				if n.Arcs[k] != want {
					t.Errorf("%d-arcs: %d, want %d", k, n.Arcs[k], want)
				}
			}
		})
	}
	if got := c.Nodes[1].Rings[0].Holders; strings.Join(got, ",") != "default/four,default/four,,,,,default/four,default/four" {
		t.Fatalf("dra-a ring holders %q", got)
	}
	if c.Summary.Free != 23 || c.Summary.Total != 32 || c.Summary.Arcs[4] != 5 {
		t.Fatalf("summary %+v", c.Summary)
	}
	byName := map[string]Pod{}
	for _, p := range c.Pods {
		byName[p.Name] = p
	}
	if p := byName["four"]; p.Contiguous == nil || !*p.Contiguous || strings.Join(p.LPUs, ",") != "lpu6,lpu7,lpu0,lpu1" {
		t.Fatalf("pod four: %+v", p)
	}
	if p := byName["singles"]; p.Contiguous == nil || *p.Contiguous {
		t.Fatalf("pod singles (lpu8, lpu10) counted contiguous: %+v", p)
	}
	if _, ok := byName["done"]; ok {
		t.Fatal("a finished pod is shown holding LPUs")
	}
	text := c.Text()
	for _, want := range []string{"dra-a  dra  4/8 free, largest free arc 4", "ring0  A A . . . . A A", "A default/four", "# # # . . . . .", "room for 23×1-arc 10×2-arc 5×4-arc 1×8-arc more"} {
		if !strings.Contains(text, want) {
			t.Errorf("text lacks %q:\n%s", want, text)
		}
	}
}

// Rings come out the same whichever sizes lpu-dra publishes (config
// dra.arcSizes), single LPUs or not.
func TestRingsFromAnyPublishedSizes(t *testing.T) {
	want := draRings(draNode(t, "n", 2))
	if len(want["n"]) != 2 || strings.Join(want["n"][1], ",") != "lpu8,lpu9,lpu10,lpu11,lpu12,lpu13,lpu14,lpu15" {
		t.Fatalf("rings from every arc: %v", want)
	}
	for _, sizes := range [][]int{{1, 2, 4, 8}, {4, 8}, {3}, {8}} {
		got := draRings(draNode(t, "n", 2, sizes...))
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("sizes %v: rings %v, want %v", sizes, got, want)
		}
	}
}

// A claim lpu-dra reported in status.devices shows its LPUs and device
// nodes from there, marked prepared, also on a node whose slices this
// reader did not see (so its rings are unknown); a claim without status
// is allocated, its LPUs from the slices; a garbled entry falls back to
// the slices.
func TestPodsFromClaimStatus(t *testing.T) {
	entry := func(node, dev, raw string) resourceapi.AllocatedDeviceStatus {
		return resourceapi.AllocatedDeviceStatus{Driver: inject.Driver, Pool: node, Device: dev, Data: &runtime.RawExtension{Raw: []byte(raw)}}
	}
	arc := alloc.Arc{Ring: 0, Start: 7, Size: 2}
	prepared := claim("c1", "p1", "dra-a", arc)
	prepared.Status.Devices = []resourceapi.AllocatedDeviceStatus{
		entry("dra-a", arcslice.DeviceName(arc), `{"lpus":["lpu7","lpu0"],"ring":0,"start":7,"size":2,"deviceNodes":["/dev/lpu7","/dev/lpu0"]}`)}
	unseen := claim("c2", "p2", "dra-x", arc)
	unseen.Status.Devices = []resourceapi.AllocatedDeviceStatus{entry("dra-x", arcslice.DeviceName(arc), `{"lpus":["lpu15","lpu8"],"ring":0,"start":7,"size":2}`)}
	allocated := claim("c3", "p3", "dra-a", alloc.Arc{Ring: 0, Start: 2, Size: 2})
	garbled := claim("c4", "p4", "dra-a", alloc.Arc{Ring: 0, Start: 4, Size: 1})
	garbled.Status.Devices = []resourceapi.AllocatedDeviceStatus{entry("dra-a", "ring0-start4-size1", `{"lpus":["lpu4","lpu5"],"ring":0,"start":4,"size":1}`)}
	nodes := []corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "dra-a"}}}
	c := Build(nodes, draNode(t, "dra-a", 1), []resourceapi.ResourceClaim{prepared, unseen, allocated, garbled}, nil, nil)
	byName := map[string]Pod{}
	for _, p := range c.Pods {
		byName[p.Name] = p
	}
	for name, want := range map[string]struct {
		lpus, nodes string
		prepared    bool
	}{
		"p1": {"lpu7,lpu0", "/dev/lpu7,/dev/lpu0", true},
		"p2": {"lpu15,lpu8", "", true},
		"p3": {"lpu2,lpu3", "", false},
		"p4": {"lpu4", "", false},
	} {
		p := byName[name]
		if strings.Join(p.LPUs, ",") != want.lpus || strings.Join(p.DeviceNodes, ",") != want.nodes || p.Prepared == nil || *p.Prepared != want.prepared ||
			p.Contiguous == nil || !*p.Contiguous {
			t.Errorf("%s: %+v, want LPUs %s nodes %q prepared %v", name, p, want.lpus, want.nodes, want.prepared)
		}
	}
	if got := strings.Join(c.Nodes[0].Rings[0].Holders, ","); got != "default/p1,,default/p3,default/p3,default/p4,,,default/p1" {
		t.Errorf("holders %s", got)
	}
	text := c.PodsText()
	for _, want := range []string{"STATE", "prepared  lpu7,lpu0", "allocated lpu2,lpu3"} {
		if !strings.Contains(text, want) {
			t.Errorf("pods text lacks %q:\n%s", want, text)
		}
	}
}

// TestClaimStatusCrossChecked is F6 of the fourth round: a claim status
// written to name other LPUs than the allocation (anyone with claim-status
// rights below 1.36 can) must not make the allocated LPUs look free, and
// the escape sequences and newlines in it, or in a slice's lpus
// attribute, are printed escaped.
func TestClaimStatusCrossChecked(t *testing.T) {
	arc := alloc.Arc{Ring: 0, Start: 0, Size: 2}
	lying := claim("c1", "victim", "dra-a", arc)
	lying.Status.Devices = []resourceapi.AllocatedDeviceStatus{{Driver: inject.Driver, Pool: "dra-a", Device: arcslice.DeviceName(arc),
		Data: &runtime.RawExtension{Raw: []byte(`{"lpus":["lpu6","lpu7\u001b[2J"],"ring":0,"start":0,"size":2,"deviceNodes":["/dev/lpu6","/dev/\u001b]0;pwned\u0007"]}`)}}}
	wrongArc := claim("c2", "other", "dra-a", alloc.Arc{Ring: 0, Start: 4, Size: 1})
	wrongArc.Status.Devices = []resourceapi.AllocatedDeviceStatus{{Driver: inject.Driver, Pool: "dra-a", Device: "ring0-start4-size1",
		Data: &runtime.RawExtension{Raw: []byte(`{"lpus":["lpu5"],"ring":0,"start":5,"size":1}`)}}}
	slices := draNode(t, "dra-a", 1)
	for _, sl := range slices { // slices whose lpus carry an escape and a newline for the ring's last LPU
		for i, d := range sl.Spec.Devices {
			if a, ok := d.Attributes["lpus"]; ok && a.StringValue != nil {
				v := strings.ReplaceAll(*a.StringValue, "lpu7", "lpu7\x1b[31m\nforged line")
				sl.Spec.Devices[i].Attributes["lpus"] = resourceapi.DeviceAttribute{StringValue: &v}
			}
		}
	}
	c := Build([]corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "dra-a"}}}, slices, []resourceapi.ResourceClaim{lying, wrongArc}, nil, nil)
	byName := map[string]Pod{}
	for _, p := range c.Pods {
		byName[p.Name] = p
	}
	v := byName["victim"]
	if strings.Join(v.LPUs, ",") != "lpu0,lpu1" || !v.StatusMismatch || v.Prepared == nil || *v.Prepared || len(v.DeviceNodes) != 0 {
		t.Errorf("victim: %+v, want the allocation's lpu0,lpu1, a mismatch, not prepared, no device nodes from the status", v)
	}
	if o := byName["other"]; strings.Join(o.LPUs, ",") != "lpu4" || !o.StatusMismatch {
		t.Errorf("other: %+v, want lpu4 and a mismatch (the status names another arc)", o)
	}
	holders := c.Nodes[0].Rings[0].Holders
	if holders[0] != "default/victim" || holders[1] != "default/victim" || holders[6] != "" || holders[7] != "" {
		t.Errorf("holders %q: the allocated LPUs must show held, the status's ones free", holders)
	}
	text := c.Text() + c.PodsText()
	if !strings.Contains(text, `lpu7\x1b[31m\nforged line`) {
		t.Errorf("the slice's LPU ID is not shown escaped:\n%s", text)
	}
	if strings.ContainsAny(text, "\x1b\x07") || strings.Contains(text, "\nforged line") {
		t.Errorf("raw escape sequences or a forged line printed:\n%q", text)
	}
	if !strings.Contains(c.PodsText(), "mismatch") {
		t.Errorf("pods text does not say the status mismatches:\n%s", c.PodsText())
	}
	if got := Printable("a\x1b[2Jb\nc\u200bd"); got != `a\x1b[2Jb\nc\u200bd` {
		t.Errorf("Printable = %q", got)
	}
}

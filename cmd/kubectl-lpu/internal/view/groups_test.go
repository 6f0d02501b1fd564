package view

import (
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedapi "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hyperaccel/lpu-node/pkg/alloc"
)

// groupPod is a pod naming PodGroup group ("" none), on node, in phase.
func groupPod(name, group, node string, phase corev1.PodPhase) corev1.Pod {
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Spec: corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{Phase: phase}}
	if group != "" {
		p.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: &group}
	}
	return p
}

// podGroup is a gang PodGroup of minCount with the scheduler's condition
// (status "" none).
func podGroup(name string, minCount int32, status metav1.ConditionStatus, reason string) schedapi.PodGroup {
	g := schedapi.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: schedapi.PodGroupSpec{SchedulingPolicy: schedapi.PodGroupSchedulingPolicy{Gang: &schedapi.GangSchedulingPolicy{MinCount: minCount}}}}
	if status != "" {
		g.Status.Conditions = []metav1.Condition{{Type: schedapi.PodGroupInitiallyScheduled, Status: status, Reason: reason}}
	}
	return g
}

// A gang whose pods all run is whole; one with a pod still Pending is not
// and lists that pod though it holds no LPUs; a basic group needs one
// pod; a group without its object counts every pod that names it; a
// finished pod and a pod of no group are not members.
func TestPodGroups(t *testing.T) {
	nodes := []corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "dra-a"}}}
	claims := []resourceapi.ResourceClaim{
		claim("c0", "job-0", "dra-a", alloc.Arc{Ring: 0, Start: 0, Size: 4}),
		claim("c1", "job-1", "dra-a", alloc.Arc{Ring: 0, Start: 4, Size: 4}),
		claim("c2", "half-0", "dra-a", alloc.Arc{Ring: 1, Start: 0, Size: 4}),
		claim("c3", "solo", "dra-a", alloc.Arc{Ring: 1, Start: 4, Size: 2}),
	}
	pods := []corev1.Pod{
		groupPod("job-0", "job", "dra-a", corev1.PodRunning),
		groupPod("job-1", "job", "dra-a", corev1.PodRunning),
		groupPod("half-0", "half", "dra-a", corev1.PodRunning),
		groupPod("half-1", "half", "", corev1.PodPending),
		groupPod("half-old", "half", "dra-a", corev1.PodSucceeded),
		groupPod("big-0", "big", "", corev1.PodPending),
		groupPod("big-1", "big", "", corev1.PodPending),
		groupPod("orphan-0", "orphan", "dra-a", corev1.PodRunning),
		groupPod("solo", "", "dra-a", corev1.PodRunning),
	}
	basic := podGroup("basic", 0, "", "")
	basic.Spec.SchedulingPolicy = schedapi.PodGroupSchedulingPolicy{Basic: &schedapi.BasicSchedulingPolicy{}}
	groups := []schedapi.PodGroup{podGroup("job", 2, metav1.ConditionTrue, "Scheduled"), podGroup("half", 2, "", ""),
		podGroup("big", 2, metav1.ConditionFalse, schedapi.PodGroupReasonUnschedulable), basic}
	c := Build(nodes, draNode(t, "dra-a", 2), claims, pods, groups)

	want := map[string]Group{
		"job":    {MinCount: 2, Pods: 2, Running: 2, Whole: true, Scheduled: "True"},
		"half":   {MinCount: 2, Pods: 2, Running: 1},
		"big":    {MinCount: 2, Pods: 2, Scheduled: "False Unschedulable"},
		"basic":  {MinCount: 1},
		"orphan": {Pods: 1, Running: 1, Whole: true},
	}
	if len(c.Groups) != len(want) {
		t.Fatalf("%d groups, want %d: %+v", len(c.Groups), len(want), c.Groups)
	}
	for _, g := range c.Groups {
		w := want[g.Name]
		w.Namespace, w.Name = "default", g.Name
		if *g != w {
			t.Errorf("group %s: %+v, want %+v", g.Name, *g, w)
		}
	}
	byName := map[string]Pod{}
	for _, p := range c.Pods {
		byName[p.Name] = p
	}
	for pod, group := range map[string]string{"job-0": "job", "job-1": "job", "half-0": "half", "half-1": "half", "big-0": "big", "big-1": "big", "orphan-0": "orphan", "solo": ""} {
		p, ok := byName[pod]
		switch {
		case !ok:
			t.Errorf("pod %s not listed", pod)
		case group == "" && p.Group != nil, group != "" && (p.Group == nil || p.Group.Name != group):
			t.Errorf("pod %s in group %+v, want %q", pod, p.Group, group)
		}
	}
	if _, ok := byName["half-old"]; ok {
		t.Error("a finished pod is listed")
	}
	if p := byName["half-1"]; p.Count != 0 || p.Node != "" || len(p.LPUs) != 0 {
		t.Errorf("pending pod half-1 shown holding LPUs: %+v", p)
	}
	checkGroupsOutput(t, c)
}

// checkGroupsOutput checks the pods text and the JSON a script reads.
func checkGroupsOutput(t *testing.T, c Cluster) {
	t.Helper()
	text := c.PodsText()
	for _, want := range []string{"GROUP", "default/half-1                           half                     -                0", "pending",
		"PODGROUP", "default/big                              2        2     0       false False Unschedulable",
		"default/job                              2        2     2       true  True", "default/orphan                           ?"} {
		if !strings.Contains(text, want) {
			t.Errorf("pods text lacks %q:\n%s", want, text)
		}
	}
	b, err := json.Marshal(c.Pods)
	if err != nil {
		t.Fatal(err)
	}
	var decoded []struct {
		Name     string `json:"name"`
		PodGroup *struct {
			Name  string `json:"name"`
			Whole bool   `json:"whole"`
		} `json:"podGroup"`
	}
	if err := json.Unmarshal(b, &decoded); err != nil {
		t.Fatal(err)
	}
	whole := map[string]bool{}
	for _, p := range decoded {
		if p.PodGroup != nil {
			whole[p.Name] = p.PodGroup.Whole
		}
	}
	if !whole["job-0"] || whole["half-0"] || whole["big-1"] || len(whole) != 7 {
		t.Errorf("JSON podGroup.whole per pod: %v", whole)
	}
}

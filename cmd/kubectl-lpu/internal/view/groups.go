package view

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	schedapi "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/meta"
)

// withGroups marks the LPU pods of list with the PodGroup their pod names,
// adds the group members that hold no LPUs, and returns the groups: every
// PodGroup object, and every group a pod names without one.
func withGroups(list []Pod, pods []corev1.Pod, objs []schedapi.PodGroup) ([]Pod, []*Group) {
	groups := map[string]*Group{}
	for _, o := range objs {
		groups[o.Namespace+"/"+o.Name] = groupOf(o)
	}
	member := map[string]*Group{} // pod ns/name → its group
	for _, p := range pods {
		sg := p.Spec.SchedulingGroup
		if sg == nil || sg.PodGroupName == nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		key := p.Namespace + "/" + *sg.PodGroupName
		g := groups[key]
		if g == nil {
			g = &Group{Namespace: p.Namespace, Name: *sg.PodGroupName}
			groups[key] = g
		}
		g.Pods++
		if p.Status.Phase == corev1.PodRunning {
			g.Running++
		}
		member[p.Namespace+"/"+p.Name] = g
	}
	listed := map[string]bool{}
	for i := range list {
		key := list[i].Namespace + "/" + list[i].Name
		list[i].Group, listed[key] = member[key], true
	}
	for _, p := range pods {
		key := p.Namespace + "/" + p.Name
		if g := member[key]; g != nil && !listed[key] {
			list = append(list, Pod{Namespace: p.Namespace, Name: p.Name, Node: p.Spec.NodeName, Group: g})
		}
	}
	out := make([]*Group, 0, len(groups))
	for _, g := range groups {
		g.Whole = g.Pods > 0 && g.Running >= g.Pods
		if g.MinCount > 0 {
			g.Whole = g.Running >= g.MinCount
		}
		out = append(out, g)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Namespace+"/"+out[i].Name < out[j].Namespace+"/"+out[j].Name })
	return list, out
}

// groupOf is a PodGroup object's minCount and scheduler condition.
func groupOf(o schedapi.PodGroup) *Group {
	g := &Group{Namespace: o.Namespace, Name: o.Name, MinCount: 1}
	if gang := o.Spec.SchedulingPolicy.Gang; gang != nil {
		g.MinCount = int(gang.MinCount)
	}
	if c := meta.FindStatusCondition(o.Status.Conditions, schedapi.PodGroupInitiallyScheduled); c != nil {
		g.Scheduled = string(c.Status)
		if c.Reason != "" && c.Status != "True" {
			g.Scheduled += " " + c.Reason
		}
	}
	return g
}

// groupsText is the table of groups under the pods view.
func (c Cluster) groupsText() string {
	if len(c.Groups) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n%-40s %-8s %-5s %-7s %-5s %s\n", "PODGROUP", "MINCOUNT", "PODS", "RUNNING", "WHOLE", "SCHEDULED")
	for _, g := range c.Groups {
		minCount, sched := fmt.Sprint(g.MinCount), g.Scheduled
		if g.MinCount == 0 {
			minCount = "?" // no PodGroup object
		}
		if sched == "" {
			sched = "-"
		}
		fmt.Fprintf(&b, "%-40s %-8s %-5d %-7d %-5t %s\n", Printable(g.Namespace+"/"+g.Name), minCount, g.Pods, g.Running, g.Whole, Printable(sched))
	}
	return b.String()
}

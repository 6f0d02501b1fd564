// Package clusterread lists what `kubectl lpu` shows from the API server
// and degrades to what the cluster serves: without resource.k8s.io/v1
// (DRA) or the Workload API, or without the right to list them, the view
// is built from what remains, and the result says what is missing.
package clusterread

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedapi "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"github.com/hyperaccel/lpu-node/cmd/kubectl-lpu/internal/view"
)

// DRAGroupVersion is the DRA API the view reads (lpu-dra publishes it).
const DRAGroupVersion = "resource.k8s.io/v1"

// Options say what to read.
type Options struct {
	// Namespace limits pods, ResourceClaims and PodGroups to one
	// namespace; "" reads every namespace.
	Namespace string
	// Nodes lists the nodes (the nodes view needs them, the pods view
	// does not); NodeSelector, a label selector, narrows them, and
	// NodeName, when set, keeps that node alone (an error if it is not
	// there, as kubectl get nodes NAME).
	Nodes        bool
	NodeSelector string
	NodeName     string
}

// Result is the view and what was read to build it.
type Result struct {
	Cluster view.Cluster
	// Pods are the pods listed, for selectors over their labels.
	Pods []corev1.Pod
	// Claims are the ResourceClaims listed (none without DRA), for the
	// pods each is reserved for.
	Claims []resourceapi.ResourceClaim
	// Warnings say what could not be read and what the view lacks for it.
	Warnings []string
}

// Read lists nodes, ResourceSlices, ResourceClaims, pods and PodGroups and
// builds the view. Only nodes and pods are required: the DRA objects and
// the PodGroups are optional, as a cluster may not serve them.
func Read(ctx context.Context, cs kubernetes.Interface, o Options) (Result, error) {
	var r Result
	var nodes []corev1.Node
	if o.Nodes {
		l, err := listNodes(ctx, cs, o)
		if err != nil {
			return r, err
		}
		nodes = l
	}
	slices, claims, dra, err := readDRA(ctx, cs, o.Namespace)
	if err != nil {
		return r, err
	}
	if !dra.Available {
		r.Warnings = append(r.Warnings, "DRA data unavailable: "+dra.Reason+"; showing device-plugin nodes and pods only")
	}
	pods, err := cs.CoreV1().Pods(o.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		if o.Namespace == "" && apierrors.IsForbidden(err) {
			return r, fmt.Errorf("list pods in all namespaces (-n NAMESPACE reads one): %w", err)
		}
		return r, fmt.Errorf("list pods: %w", err)
	}
	groups, warning, err := listGroups(ctx, cs, o.Namespace)
	if err != nil {
		return r, err
	}
	if warning != "" {
		r.Warnings = append(r.Warnings, warning)
	}
	r.Pods, r.Claims = pods.Items, claims
	r.Cluster = view.Build(nodes, slices, claims, pods.Items, groups)
	r.Cluster.DRA = dra
	return r, nil
}

// listNodes lists the nodes o names: every node, those matching
// NodeSelector, or NodeName alone.
func listNodes(ctx context.Context, cs kubernetes.Interface, o Options) ([]corev1.Node, error) {
	lo := metav1.ListOptions{LabelSelector: o.NodeSelector}
	if o.NodeName != "" {
		lo.FieldSelector = fields.OneTermEqualSelector("metadata.name", o.NodeName).String()
	}
	l, err := cs.CoreV1().Nodes().List(ctx, lo)
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	if o.NodeName != "" && len(l.Items) == 0 {
		if o.NodeSelector != "" {
			return nil, fmt.Errorf("node %q not found with labels %q", o.NodeName, o.NodeSelector)
		}
		return nil, fmt.Errorf("node %q not found", o.NodeName)
	}
	return l.Items, nil
}

// readDRA lists lpu-dra's ResourceSlices and the ResourceClaims of
// namespace. A cluster that does not serve resource.k8s.io/v1, or a reader
// not allowed to list them, gives none and the reason; any other failure
// is an error.
func readDRA(ctx context.Context, cs kubernetes.Interface, namespace string) ([]resourceapi.ResourceSlice, []resourceapi.ResourceClaim, view.DRA, error) {
	slices, err := cs.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if dra, ok := unavailable(cs, "resourceslices", err); ok {
		return nil, nil, dra, nil
	}
	if err != nil {
		return nil, nil, view.DRA{}, fmt.Errorf("list resourceslices: %w", err)
	}
	claims, err := cs.ResourceV1().ResourceClaims(namespace).List(ctx, metav1.ListOptions{})
	if dra, ok := unavailable(cs, "resourceclaims", err); ok {
		return nil, nil, dra, nil
	}
	if err != nil {
		return nil, nil, view.DRA{}, fmt.Errorf("list resourceclaims: %w", err)
	}
	return slices.Items, claims.Items, view.DRA{Available: true}, nil
}

// unavailable says whether err means the DRA API cannot be read here (not
// served, or forbidden) and why.
func unavailable(cs kubernetes.Interface, resource string, err error) (view.DRA, bool) {
	switch {
	case apierrors.IsNotFound(err):
		return view.DRA{Reason: "the cluster does not serve " + DRAGroupVersion + servedInstead(cs)}, true
	case apierrors.IsForbidden(err):
		return view.DRA{Reason: "not allowed to list " + resource + " (" + DRAGroupVersion + ")"}, true
	}
	return view.DRA{}, false
}

// servedInstead names the versions of resource.k8s.io the cluster does
// serve, if any (an older cluster with a beta DRA API), as " (it serves
// v1beta1)"; "" when none or discovery fails.
func servedInstead(cs kubernetes.Interface) string {
	groups, err := cs.Discovery().ServerGroups()
	if err != nil {
		return ""
	}
	for _, g := range groups.Groups {
		if g.Name != "resource.k8s.io" {
			continue
		}
		var vs []string
		for _, v := range g.Versions {
			vs = append(vs, v.Version)
		}
		if len(vs) > 0 {
			return " (it serves " + strings.Join(vs, ", ") + ")"
		}
	}
	return ""
}

// listGroups lists the PodGroups (Workload API). A cluster that does not
// serve them (the GenericWorkload gate or scheduling.k8s.io/v1beta1 off)
// has none; a reader not allowed to list them sees the groups the pods
// name, without minCount, and a warning says so.
func listGroups(ctx context.Context, cs kubernetes.Interface, namespace string) ([]schedapi.PodGroup, string, error) {
	l, err := cs.SchedulingV1beta1().PodGroups(namespace).List(ctx, metav1.ListOptions{})
	switch {
	case err == nil:
		return l.Items, "", nil
	case apierrors.IsNotFound(err):
		return nil, "", nil
	case apierrors.IsForbidden(err):
		return nil, "not allowed to list podgroups: groups shown without minCount", nil
	}
	return nil, "", fmt.Errorf("list podgroups: %w", err)
}

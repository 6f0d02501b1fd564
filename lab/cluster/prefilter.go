package main

import (
	"context"
	"encoding/json"

	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/hyperaccel/lpu-node/pkg/arcslice"
	"github.com/hyperaccel/lpu-node/pkg/nodelabel"
)

// prefilterPolicySuffix ends the name of the chart's prefilter policy,
// <fullname>-dra-prefilter.
const prefilterPolicySuffix = "-dra-prefilter"

// policyParamsSuffix ends the name of the ConfigMap the chart's policies
// read their parameters from, <fullname>-policy-params.
const policyParamsSuffix = "-policy-params"

// labelKeys are the prefilter labels lpu-dra keeps on its Node.
var labelKeys = []string{arcslice.LabelLargestFreeArc, arcslice.LabelFreeLPUs}

// prefilter is what a prefilter arm runs beside its churn: the chart's
// MutatingAdmissionPolicy and its bindings, created from the manifest,
// and one nodelabel.Keeper per node, as each node's lpu-dra runs one
// (simNode.publish Sets its labels right before each publication).
type prefilter struct {
	l      *lab
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// startPrefilter creates the policy's parameters, the policy and its
// bindings, waits until the API server applies them, and starts a Keeper
// for every node.
func startPrefilter(ctx context.Context, l *lab) (*prefilter, error) {
	pf := &prefilter{l: l}
	p := l.shipped.prefilter
	if p.params != nil {
		// Kept between arms: the same manifest's parameters each time.
		cm := p.params.DeepCopy()
		cm.ResourceVersion = ""
		if _, err := l.cs.CoreV1().ConfigMaps(cm.Namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, refused("ConfigMap "+cm.Name, cm, err)
		}
	}
	policy := p.policy.DeepCopy()
	policy.ResourceVersion = ""
	if _, err := l.cs.AdmissionregistrationV1().MutatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		return nil, refused("MutatingAdmissionPolicy "+policy.Name, policy, err)
	}
	for _, b := range p.bindings {
		b = b.DeepCopy()
		b.ResourceVersion = ""
		if _, err := l.cs.AdmissionregistrationV1().MutatingAdmissionPolicyBindings().Create(ctx, b, metav1.CreateOptions{}); err != nil {
			return nil, refused("MutatingAdmissionPolicyBinding "+b.Name, b, err)
		}
	}
	if err := pf.waitPolicy(ctx, true); err != nil {
		return nil, err
	}
	kctx, cancel := context.WithCancel(ctx)
	pf.cancel = cancel
	for _, n := range l.nodes {
		k := nodelabel.New(nodelabel.Options{Client: l.cs, Node: n.name})
		n.labels = k
		pf.wg.Add(1)
		go func() {
			defer pf.wg.Done()
			_ = k.Run(kctx) // it logs its own failures
		}()
	}
	return pf, nil
}

// writes is how many label patches the keepers made so far (none without
// a prefilter); an error
// when one of them stopped writing.
func (pf *prefilter) writes() (int, error) {
	total := 0
	if pf == nil {
		return 0, nil
	}
	for _, n := range pf.l.nodes {
		if n.labels == nil {
			continue
		}
		if err := n.labels.Disabled(); err != nil {
			return total, fmt.Errorf("node %s: labels not kept: %w", n.name, err)
		}
		total += n.labels.Writes()
	}
	return total, nil
}

// settle waits, at most within, until every node's labels are those that
// publish last Set (the view of the slices last published), and returns
// how long that took: a rise shows at once, a fall after the Keeper's
// LowerAfter. Nothing may publish meanwhile (the arm's loop paused or
// not running).
func (pf *prefilter) settle(ctx context.Context, within time.Duration) (time.Duration, error) {
	start := time.Now()
	for {
		off, err := pf.mismatches(ctx)
		if err != nil {
			return 0, err
		}
		if len(off) == 0 {
			return time.Since(start), nil
		}
		if time.Since(start) > within {
			return 0, fmt.Errorf("node labels differ from the published view %v after it was published, on %d nodes; first: %s", within, len(off), off[0])
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// mismatches lists every node whose labels are not what publish last Set.
func (pf *prefilter) mismatches(ctx context.Context) ([]string, error) {
	list, err := pf.l.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	labels := map[string]map[string]string{}
	for _, n := range list.Items {
		labels[n.Name] = n.Labels
	}
	var off []string
	for _, n := range pf.l.nodes {
		want := n.labelled.Labels()
		for _, k := range labelKeys {
			if got, ok := labels[n.name][k]; !ok || got != want[k] {
				off = append(off, fmt.Sprintf("node %s %s=%q, published view %s", n.name, k, got, want[k]))
			}
		}
	}
	return off, nil
}

// stop ends the keepers, deletes the policy and its bindings, waits until
// the API server no longer applies them, and removes the labels, so that
// the next arm runs without any of it.
func (pf *prefilter) stop(ctx context.Context) error {
	pf.cancel()
	pf.wg.Wait()
	for _, n := range pf.l.nodes {
		n.labels = nil
	}
	p, cs := pf.l.shipped.prefilter, pf.l.cs
	for _, b := range p.bindings {
		if err := cs.AdmissionregistrationV1().MutatingAdmissionPolicyBindings().Delete(ctx, b.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete MutatingAdmissionPolicyBinding %s: %w", b.Name, err)
		}
	}
	if err := cs.AdmissionregistrationV1().MutatingAdmissionPolicies().Delete(ctx, p.policy.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete MutatingAdmissionPolicy %s: %w", p.policy.Name, err)
	}
	if err := pf.waitPolicy(ctx, false); err != nil {
		return err
	}
	remove := map[string]any{}
	for _, k := range labelKeys {
		remove[k] = nil
	}
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": remove}})
	if err != nil {
		return err
	}
	return parallel(ctx, len(pf.l.nodes), 16, func(i int) error {
		name := pf.l.nodes[i].name
		if _, err := cs.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, body, metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("remove the prefilter labels of node %s: %w", name, err)
		}
		return nil
	})
}

// waitPolicy waits until the API server gives (on) or no longer gives
// (!on) the prefilter's node affinity to a strict and a best-effort pod:
// it loads policies from its own informer, a moment after they change.
func (pf *prefilter) waitPolicy(ctx context.Context, on bool) error {
	deadline := time.Now().Add(time.Minute)
	for {
		var seen []bool
		for _, be := range []bool{false, true} {
			arm := armSpec{name: "probe", dra: true, bestEffort: be, profile: profileDefault}
			p, err := pf.l.cs.CoreV1().Pods(namespace).Create(ctx, arm.pod("prefilter-probe", 4), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if err != nil {
				return fmt.Errorf("dry-run a pod to see the prefilter policy: %w", err)
			}
			seen = append(seen, hasPrefilterAffinity(p))
		}
		if !slices.Contains(seen, !on) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("prefilter policy %s: pods of lpu-arc-4 / lpu-4-best-effort given its node affinity %v, want %v, 1 min after it was %s",
				pf.l.shipped.prefilter.policy.Name, seen, on, map[bool]string{true: "created", false: "deleted"}[on])
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// hasPrefilterAffinity reports whether p requires a node by a prefilter
// label.
func hasPrefilterAffinity(p *corev1.Pod) bool {
	if p.Spec.Affinity == nil || p.Spec.Affinity.NodeAffinity == nil || p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return false
	}
	for _, t := range p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		for _, e := range t.MatchExpressions {
			if slices.Contains(labelKeys, e.Key) {
				return true
			}
		}
	}
	return false
}

// settleLabels is the prefilter arm's check at the churn's end: with the
// loop paused (nothing published meanwhile), every node's labels must
// come to be the view last published within LowerAfter and a minute; a
// node that does not is a harness error. It returns how long it took.
func (r *runner) settleLabels(ctx context.Context, pf *prefilter) time.Duration {
	var took time.Duration
	_ = r.paused(ctx, func() { // it fails only as ctx ends
		var err error
		took, err = pf.settle(ctx, nodelabel.DefaultLowerAfter+time.Minute)
		if err != nil && ctx.Err() == nil {
			r.errs = append(r.errs, "at the churn's end: "+err.Error()) // on the loop, which owns errs
		}
	})
	return took
}

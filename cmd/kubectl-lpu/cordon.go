package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	policyv1 "k8s.io/api/policy/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/spf13/cobra"

	"github.com/hyperaccel/lpu-node/cmd/kubectl-lpu/internal/clusterread"
	"github.com/hyperaccel/lpu-node/cmd/kubectl-lpu/internal/view"
	"github.com/hyperaccel/lpu-node/pkg/cordon"
)

func (c *cli) cordonCmd() *cobra.Command {
	var evict bool
	cmd := &cobra.Command{
		Use:   "cordon NODE LPU",
		Short: "Take one LPU of NODE out of service; --evict also evicts the pods holding it",
		Long: `Take one LPU of NODE out of service, the rest of the node serving on. The LPU
is added to the Node annotation ` + cordon.Annotation + ` (a Node patch by
you, in the API server's audit log). On a DRA node lpu-dra republishes every
arc holding the LPU with the taint ` + cordon.Annotation + `=LPU:NoSchedule,
so no new claim gets it; on a device-plugin node the device plugin reports
it Unhealthy (reason "cordoned") and the kubelet stops offering it. Pods
already holding it run on. --evict evicts them through the Eviction API,
which respects PodDisruptionBudgets (DRA nodes: the pods of the allocated
claims over the LPU; the API does not say which device-plugin pod holds
which LPU, so there --evict only says so). The annotation lives on the Node:
it survives daemon restarts.`,
		Example:           "  kubectl lpu cordon node-a lpu3\n  kubectl lpu cordon node-a lpu3 --evict",
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: c.completeNodeLPU,
		RunE: func(cmd *cobra.Command, args []string) error {
			return c.cordon(args[0], args[1], true, evict)
		},
	}
	cmd.Flags().BoolVar(&evict, "evict", false, "Also evict the pods holding the LPU (Eviction API: PodDisruptionBudgets are respected)")
	return cmd
}

func (c *cli) uncordonCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "uncordon NODE LPU",
		Short: "Put a cordoned LPU of NODE back into service",
		Long: `Put a cordoned LPU of NODE back into service: it leaves the Node annotation
` + cordon.Annotation + ` (a Node patch by you, in the audit log), lpu-dra
republishes its arcs untainted, the device plugin reports it Healthy again.`,
		Example:           "  kubectl lpu uncordon node-a lpu3",
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: c.completeNodeLPU,
		RunE: func(cmd *cobra.Command, args []string) error {
			return c.cordon(args[0], args[1], false, false)
		},
	}
}

// completeNodeLPU offers node names for NODE, then, for LPU, the LPUs the
// node's annotation cordons (uncordon) or nothing (cordon: free text).
func (c *cli) completeNodeLPU(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if len(args) == 0 {
		return c.completeNode(cmd, args, toComplete)
	}
	if len(args) > 1 || cmd.Name() != "uncordon" {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	cs, err := c.client()
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	n, err := cs.CoreV1().Nodes().Get(context.Background(), args[0], metav1.GetOptions{})
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	ids, _ := cordon.Parse(n.Annotations[cordon.Annotation])
	return ids, cobra.ShellCompDirectiveNoFileComp
}

// cordon cordons (on) or uncordons lpu on node and prints what changed;
// with evict it then evicts the pods holding the LPU.
func (c *cli) cordon(node, lpu string, on, evict bool) error {
	if _, err := cordon.Format([]string{lpu}); err != nil {
		return fmt.Errorf("LPU %q: want an LPU ID such as lpu3 (lpu<N>, no leading zeros)", lpu)
	}
	cs, err := c.client()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var r clusterread.Result
	if on {
		// The node's LPUs (is lpu one of them?) and, for --evict, who holds it.
		r, err = clusterread.Read(ctx, cs, clusterread.Options{Nodes: true, NodeName: node})
		if err != nil {
			return err
		}
		for _, w := range r.Warnings {
			fmt.Fprintln(c.errOut, "Warning:", w)
		}
		if err := checkLPU(r.Cluster, node, lpu); err != nil {
			return err
		}
	}
	changed, ids, err := setCordoned(ctx, cs, node, lpu, on)
	if err != nil {
		return err
	}
	verb := map[bool]string{true: "cordoned", false: "uncordoned"}[on]
	if !changed {
		verb = "already " + verb
	}
	fmt.Fprintf(c.out, "node/%s %s %s (cordoned now: %s)\n", node, lpu, verb, orNone(ids))
	if !evict {
		return nil
	}
	return c.evictHolders(ctx, cs, r, node, lpu)
}

// checkLPU refuses an LPU a DRA node does not publish; of a device-plugin
// node the API shows a count, not IDs, so any well-formed ID is taken.
func checkLPU(cl view.Cluster, node, lpu string) error {
	for _, n := range cl.Nodes {
		if n.Name != node || n.Mode != "dra" {
			continue
		}
		var all []string
		for _, r := range n.Rings {
			all = append(all, r.LPUs...)
		}
		if !slices.Contains(all, lpu) {
			return fmt.Errorf("node %s publishes no %s (its LPUs: %s)", node, lpu, strings.Join(all, ","))
		}
	}
	return nil
}

// setCordoned adds lpu to (on) or removes it from node's cordoned-LPU
// annotation. The merge patch carries the resourceVersion it was computed
// from, so a concurrent change (another operator's cordon) is a conflict,
// retried on the fresh Node, never lost. It returns whether the annotation
// changed and the cordoned LPUs after.
func setCordoned(ctx context.Context, cs kubernetes.Interface, node, lpu string, on bool) (bool, []string, error) {
	var changed bool
	var after []string
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("get node %s: %w", node, err)
		}
		old := n.Annotations[cordon.Annotation]
		// A malformed value keeps its well-formed entries; the bad ones go.
		ids, _ := cordon.Parse(old)
		next := slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return id == lpu })
		if on {
			next = append(next, lpu)
		}
		value, err := cordon.Format(next)
		if err != nil {
			return err
		}
		after, _ = cordon.Parse(value)
		if value == old {
			changed = false
			return nil
		}
		var v any = value
		if value == "" {
			v = nil // the last one: no annotation at all
		}
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
			"resourceVersion": n.ResourceVersion, "annotations": map[string]any{cordon.Annotation: v}}})
		if err != nil {
			return fmt.Errorf("cordon patch: %w", err)
		}
		if _, err := cs.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("patch node %s: %w", node, err)
		}
		changed = true
		return nil
	})
	return changed, after, err
}

// evictHolders evicts the pods holding lpu on node through the Eviction
// API. A refusal (a PodDisruptionBudget: 429) is reported by pod; the
// command can be run again, cordoning being idempotent.
func (c *cli) evictHolders(ctx context.Context, cs kubernetes.Interface, r clusterread.Result, node, lpu string) error {
	var mode string
	for _, n := range r.Cluster.Nodes {
		if n.Name == node {
			mode = n.Mode
		}
	}
	switch mode {
	case "device-plugin":
		return fmt.Errorf("--evict: node %s serves LPUs through the device plugin, and the API does not say which pod holds %s "+
			"(the pod label of the node's lpu_* metrics does); %s is cordoned, evict its pod yourself", node, lpu, lpu)
	case "":
		// No slices and no allocatable LPUs visible here (lpu-dra down, or
		// DRA objects not readable): "no holder" would be a guess.
		return fmt.Errorf("--evict: node %s shows no LPUs to this reader, so the pods holding %s are unknown; %s is cordoned, none evicted",
			node, lpu, lpu)
	}
	pods := holders(r, node, lpu)
	if len(pods) == 0 {
		fmt.Fprintf(c.out, "no pod holds %s on node/%s\n", lpu, node)
		return nil
	}
	var failed []string
	for _, p := range pods {
		ns, name, _ := strings.Cut(p, "/")
		err := evictPod(ctx, cs, ns, name)
		switch {
		case err == nil:
			fmt.Fprintf(c.out, "pod/%s evicted (held %s)\n", p, lpu)
		case apierrors.IsNotFound(err):
			fmt.Fprintf(c.out, "pod/%s already gone\n", p)
		case apierrors.IsTooManyRequests(err):
			failed = append(failed, fmt.Sprintf("pod/%s: refused, it would violate its PodDisruptionBudget (%v)", p, err))
		default:
			failed = append(failed, fmt.Sprintf("pod/%s: %v", p, err))
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("evict the holders of %s (the LPU stays cordoned; run again to retry): %s", lpu, strings.Join(failed, "; "))
	}
	return nil
}

// evictPod posts an Eviction for the pod, as Evictions().Evict does, but
// without client-go's retries of a 429: a PodDisruptionBudget's refusal
// is an answer to report, not to wait out past the request timeout.
func evictPod(ctx context.Context, cs kubernetes.Interface, ns, name string) error {
	ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	return cs.PolicyV1().RESTClient().Post().AbsPath("/api/v1").Namespace(ns).Resource("pods").Name(name).
		SubResource("eviction").Body(ev).MaxRetries(0).Do(ctx).Error()
}

// holders are the pods (namespace/name), sorted, that the claims allocated
// an arc over lpu on node are reserved for.
func holders(r clusterread.Result, node, lpu string) []string {
	claims := map[string]resourceapi.ResourceClaim{}
	for _, cl := range r.Claims {
		claims[cl.Namespace+"/"+cl.Name] = cl
	}
	var out []string
	for _, p := range r.Cluster.Pods {
		if p.Node != node || p.Claim == "" || !slices.Contains(p.LPUs, lpu) {
			continue
		}
		for _, ref := range claims[p.Namespace+"/"+p.Claim].Status.ReservedFor {
			if ref.Resource == "pods" && ref.APIGroup == "" {
				out = append(out, p.Namespace+"/"+ref.Name)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// orNone joins ids, "none" when empty.
func orNone(ids []string) string {
	if len(ids) == 0 {
		return "none"
	}
	return strings.Join(ids, ",")
}

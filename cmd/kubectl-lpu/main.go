// Command kubectl-lpu is a kubectl plugin showing the cluster's LPUs at a
// glance: per node its rings as a picture (which arcs are taken, by which
// pod) and a summary of what the cluster can still take. Install it by
// copying the binary onto PATH; kubectl then runs it as `kubectl lpu`.
//
//	kubectl lpu nodes          # rings per node, then the summary
//	kubectl lpu pods           # pods holding LPUs, their IDs, contiguity, prepared or not, PodGroup
//	kubectl lpu nodes -o json  # the same for scripts
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	schedapi "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/hyperaccel/lpu-node/cmd/kubectl-lpu/internal/view"
)

const usage = `usage: kubectl lpu nodes|pods [--kubeconfig FILE] [--context NAME] [-o text|json]

  nodes   every LPU node: its rings (a letter per LPU naming its holder, "."
          free), free LPUs, the largest free arc, and how many more
          1/2/4/8-arcs the cluster can take now
  pods    every pod holding LPUs: node, count, IDs, whether they are ring
          neighbours and whether lpu-dra prepared the claim (its
          status.devices; DRA; device-plugin pods show the count only),
          the PodGroup it belongs to (Workload API; its pods are listed
          even while Pending), then each PodGroup: minCount, pods, running,
          whether it is whole and the scheduler's condition
`

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		slog.Error("exiting", "err", err)
		os.Exit(1)
	}
}

func run(args []string, out io.Writer) error {
	if len(args) == 0 || (args[0] != "nodes" && args[0] != "pods") {
		fmt.Fprint(os.Stderr, usage)
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
			return nil
		}
		return errors.New("want a command: nodes or pods")
	}
	cmd := args[0]
	fs := flag.NewFlagSet("kubectl lpu "+cmd, flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, then ~/.kube/config)")
	kctx := fs.String("context", "", "kubeconfig context")
	format := fs.String("o", "text", "output format: text or json")
	timeout := fs.Duration("request-timeout", 30*time.Second, "bound on reading the cluster")
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if *format != "text" && *format != "json" {
		return fmt.Errorf("-o %q: want text or json", *format)
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = *kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: *kctx}).ClientConfig()
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	c, err := Read(ctx, cs)
	if err != nil {
		return err
	}
	return Print(out, c, cmd, *format)
}

// Read lists nodes, ResourceSlices, ResourceClaims and pods and builds the
// view.
func Read(ctx context.Context, cs kubernetes.Interface) (view.Cluster, error) {
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return view.Cluster{}, fmt.Errorf("list nodes: %w", err)
	}
	slices, err := cs.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		return view.Cluster{}, fmt.Errorf("list resourceslices: %w", err)
	}
	claims, err := cs.ResourceV1().ResourceClaims("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return view.Cluster{}, fmt.Errorf("list resourceclaims: %w", err)
	}
	pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return view.Cluster{}, fmt.Errorf("list pods: %w", err)
	}
	groups, err := listGroups(ctx, cs)
	if err != nil {
		return view.Cluster{}, err
	}
	return view.Build(nodes.Items, slices.Items, claims.Items, pods.Items, groups), nil
}

// listGroups lists the PodGroups (Workload API). A cluster that does not
// serve them (the GenericWorkload gate or scheduling.k8s.io/v1beta1 off)
// has none; a reader not allowed to list them sees the groups the pods
// name, without minCount.
func listGroups(ctx context.Context, cs kubernetes.Interface) ([]schedapi.PodGroup, error) {
	l, err := cs.SchedulingV1beta1().PodGroups("").List(ctx, metav1.ListOptions{})
	switch {
	case err == nil:
		return l.Items, nil
	case apierrors.IsNotFound(err):
		return nil, nil
	case apierrors.IsForbidden(err):
		slog.Warn("cannot list podgroups: groups shown without minCount", "err", err)
		return nil, nil
	}
	return nil, fmt.Errorf("list podgroups: %w", err)
}

// Print writes the view of cmd (nodes or pods) as text or JSON.
func Print(w io.Writer, c view.Cluster, cmd, format string) error {
	if format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if cmd == "pods" {
			return enc.Encode(c.Pods)
		}
		return enc.Encode(struct {
			Nodes   []view.Node  `json:"nodes"`
			Summary view.Summary `json:"summary"`
		}{c.Nodes, c.Summary})
	}
	s := c.Text()
	if cmd == "pods" {
		s = c.PodsText()
	}
	_, err := io.WriteString(w, s)
	return err
}

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/signal"
	"strings"
	"syscall"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"

	"github.com/spf13/cobra"

	"github.com/hyperaccel/lpu-node/cmd/kubectl-lpu/internal/clusterread"
	"github.com/hyperaccel/lpu-node/cmd/kubectl-lpu/internal/output"
	"github.com/hyperaccel/lpu-node/cmd/kubectl-lpu/internal/view"
)

// defaultTimeout bounds each request to the API server unless
// --request-timeout says otherwise.
const defaultTimeout = "30s"

// cli is what every command shares: kubectl's connection flags and the
// output streams.
type cli struct {
	flags       *genericclioptions.ConfigFlags
	out, errOut io.Writer
}

func newRoot(out, errOut io.Writer) *cobra.Command {
	c := &cli{flags: genericclioptions.NewConfigFlags(true), out: out, errOut: errOut}
	*c.flags.Timeout = defaultTimeout
	c.flags.CacheDir = nil // no discovery cache: the plugin reads a few fixed APIs
	root := &cobra.Command{
		Use:   "kubectl-lpu",
		Short: "The cluster's LPUs at a glance: rings, holders, free arcs",
		Long: `kubectl lpu shows the cluster's LPUs: per node its rings as a picture (a
letter per LPU naming the pod holding it, "." free) and what the cluster can
still take; per pod its LPUs, whether they are ring neighbours, whether
lpu-dra prepared the claim, and its PodGroup. Without resource.k8s.io/v1
(DRA) it shows the device-plugin nodes and pods and says so. cordon and
uncordon take one LPU of a node out of service and back.`,
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl lpu"},
		Version:       version,
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cmd.SetOut(errOut)
			_ = cmd.Usage()
			return errors.New("want a command: nodes, pods, cordon, uncordon, version or completion")
		},
	}
	root.SetOut(out)
	root.SetErr(errOut)
	root.SetVersionTemplate("kubectl-lpu {{.Version}}\n") // as the daemons' --version
	// No -v shorthand: kubectl users read -v as log verbosity.
	root.Flags().Bool("version", false, "Print the plugin's version and exit (kubectl lpu version also asks the server)")
	c.flags.AddFlags(root.PersistentFlags())
	c.registerCompletions(root)
	root.AddCommand(c.nodesCmd(), c.podsCmd(), c.cordonCmd(), c.uncordonCmd(), c.versionCmd())
	return root
}

// addOutput adds -o and its completion to cmd.
func addOutput(cmd *cobra.Command, format *string, extra string) {
	cmd.Flags().StringVarP(format, "output", "o", "", "Output format: "+strings.Join(output.Formats, ", ")+" (default: the table"+extra+")")
	_ = cmd.RegisterFlagCompletionFunc("output", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return output.Formats, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveNoSpace
	})
}

func (c *cli) nodesCmd() *cobra.Command {
	var format, selector string
	cmd := &cobra.Command{
		Use:   "nodes [NODE]",
		Short: "Every LPU node (or NODE): its rings, free LPUs, the largest free arc, and the room left for 1/2/4/8-arcs",
		Long: `Every LPU node: its rings (a letter per LPU naming its holder, "." free),
free LPUs, the largest free arc, and how many more 1/2/4/8-arcs the cluster
can take now. DRA nodes come from lpu-dra's ResourceSlices and the allocated
ResourceClaims, device-plugin nodes from their allocatable count minus what
bound pods ask for. NODE shows that node alone; -l narrows the nodes (and
the summary) by their labels; nodes are not namespaced, so -n does not
apply.`,
		Example:           "  kubectl lpu nodes\n  kubectl lpu nodes node-a -o wide\n  kubectl lpu nodes -l hyperaccel.ai/lpu.present=true -o wide\n  kubectl lpu nodes -o jsonpath='{.summary.free}'",
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: c.completeNode,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := output.Check(format); err != nil {
				return err
			}
			o := clusterread.Options{Nodes: true, NodeSelector: selector}
			if len(args) == 1 {
				o.NodeName = args[0]
			}
			r, err := c.read(o)
			if err != nil {
				return err
			}
			return output.Write(c.out, format, output.Nodes{Cluster: r.Cluster})
		},
	}
	addOutput(cmd, &format, ": the ring pictures; wide adds labels, room per node and every LPU ID")
	cmd.Flags().StringVarP(&selector, "selector", "l", "", "Label selector on the nodes shown (e.g. -l key1=value1,key2=value2)")
	return cmd
}

// completeNode offers the cluster's node names for NODE, and nothing
// (not file names) once it is given or when the cluster cannot be read.
func (c *cli) completeNode(_ *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	cs, err := c.client()
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	l, err := cs.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []string
	for _, n := range l.Items {
		out = append(out, n.Name)
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

func (c *cli) podsCmd() *cobra.Command {
	var format, selector string
	var all bool
	cmd := &cobra.Command{
		Use:   "pods",
		Short: "Every pod holding LPUs: node, count, IDs, ring neighbours or not, prepared or not, PodGroup",
		Long: `Every pod holding LPUs: node, count, IDs, whether they are ring neighbours
and whether lpu-dra prepared the claim (its status.devices; DRA;
device-plugin pods show the count only), the PodGroup it belongs to
(Workload API; its pods are listed even while Pending), then each PodGroup:
minCount, pods, running, whether it is whole and the scheduler's condition.
Every namespace unless -n names one (LPUs are a cluster's, not a
namespace's); -l narrows the pods by their labels.`,
		Example: "  kubectl lpu pods\n  kubectl lpu pods -n team-a -l app=trainer -o wide\n  kubectl lpu pods -o json | jq '.[] | select(.prepared)'",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := output.Check(format); err != nil {
				return err
			}
			sel, err := labels.Parse(selector)
			if err != nil {
				return fmt.Errorf("-l %q: %w", selector, err)
			}
			ns := *c.flags.Namespace
			if all {
				ns = ""
			}
			r, err := c.read(clusterread.Options{Namespace: ns})
			if err != nil {
				return err
			}
			cl := r.Cluster
			if !sel.Empty() {
				match := map[string]bool{}
				for _, p := range r.Pods {
					match[p.Namespace+"/"+p.Name] = sel.Matches(labels.Set(p.Labels))
				}
				cl = cl.PodsWhere(func(p view.Pod) bool { return match[p.Namespace+"/"+p.Name] })
			}
			return output.Write(c.out, format, output.Pods{Cluster: cl})
		},
	}
	addOutput(cmd, &format, "; wide adds the claim and the device nodes")
	cmd.Flags().StringVarP(&selector, "selector", "l", "", "Label selector on the pods shown (e.g. -l app=trainer)")
	cmd.Flags().BoolVarP(&all, "all-namespaces", "A", false, "Every namespace, even with -n (the default without -n)")
	return cmd
}

func (c *cli) versionCmd() *cobra.Command {
	var format string
	var client bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "This plugin's version and, unless --client, the API server's",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := output.Check(format); err != nil {
				return err
			}
			v := output.Version{APIVersion: output.APIVersion, Kind: "Version", ClientVersion: version}
			var serverErr error
			if !client {
				cs, err := c.client()
				if err == nil {
					var info interface{ String() string }
					info, err = cs.Discovery().ServerVersion()
					if err == nil {
						v.ServerVersion = info.String()
					}
				}
				serverErr = err
			}
			if err := output.Write(c.out, format, v); err != nil {
				return err
			}
			if serverErr != nil {
				return fmt.Errorf("server version (--client skips it): %w", serverErr)
			}
			return nil
		},
	}
	addOutput(cmd, &format, "")
	cmd.Flags().BoolVar(&client, "client", false, "The plugin's version only; do not ask the API server")
	return cmd
}

// client is a clientset for the flags' kubeconfig, context and overrides.
func (c *cli) client() (kubernetes.Interface, error) {
	cfg, err := c.flags.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	return cs, nil
}

// read reads the cluster and prints its warnings, as kubectl does, to
// errOut.
func (c *cli) read(o clusterread.Options) (clusterread.Result, error) {
	cs, err := c.client()
	if err != nil {
		return clusterread.Result{}, err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	r, err := clusterread.Read(ctx, cs, o)
	if err != nil {
		return r, err
	}
	for _, w := range r.Warnings {
		fmt.Fprintln(c.errOut, "Warning:", w)
	}
	return r, nil
}

// registerCompletions completes the connection flags' values: contexts,
// clusters and users from the kubeconfig, namespaces from the API server.
func (c *cli) registerCompletions(root *cobra.Command) {
	fromConfig := func(names func(contexts, clusters, users []string) []string) cobra.CompletionFunc {
		return func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
			raw, err := c.flags.ToRawKubeConfigLoader().RawConfig()
			if err != nil {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			var ctxs, clusters, users []string
			for n := range raw.Contexts {
				ctxs = append(ctxs, n)
			}
			for n := range raw.Clusters {
				clusters = append(clusters, n)
			}
			for n := range raw.AuthInfos {
				users = append(users, n)
			}
			return names(ctxs, clusters, users), cobra.ShellCompDirectiveNoFileComp
		}
	}
	_ = root.RegisterFlagCompletionFunc("context", fromConfig(func(c, _, _ []string) []string { return c }))
	_ = root.RegisterFlagCompletionFunc("cluster", fromConfig(func(_, c, _ []string) []string { return c }))
	_ = root.RegisterFlagCompletionFunc("user", fromConfig(func(_, _, u []string) []string { return u }))
	_ = root.RegisterFlagCompletionFunc("namespace", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		cs, err := c.client()
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		l, err := cs.CoreV1().Namespaces().List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var out []string
		for _, ns := range l.Items {
			out = append(out, ns.Name)
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	})
}

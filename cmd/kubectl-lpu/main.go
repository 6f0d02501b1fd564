// Command kubectl-lpu is a kubectl plugin showing the cluster's LPUs at a
// glance: per node its rings as a picture (which arcs are taken, by which
// pod) and a summary of what the cluster can still take. Install it with
// krew (deploy/krew) or by copying the binary onto PATH; kubectl then runs
// it as `kubectl lpu`.
//
//	kubectl lpu nodes          # rings per node, then the summary
//	kubectl lpu pods           # pods holding LPUs, their IDs, contiguity, prepared or not, PodGroup
//	kubectl lpu nodes -o json  # the same for scripts (lpu.hyperaccel.ai/v1alpha1, schema/v1alpha1.json)
//	kubectl lpu cordon NODE lpu3 [--evict]  # take one LPU out of service (uncordon: back)
//	kubectl lpu version        # this plugin's and the API server's version
//	kubectl lpu completion bash
//
// It takes kubectl's connection flags (--kubeconfig, --context, -n, …)
// and output kinds (-o json|yaml|wide|name|jsonpath=…). Installed (or
// linked) as kubectl_complete-lpu it answers kubectl's shell completion
// for the plugin.
package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
)

// version is set at build time: -ldflags "-X main.version=$(deploy/version.sh)".
var version = "dev"

// completeName is the executable kubectl (≥ 1.26) runs to complete the
// arguments of `kubectl lpu`: it gets them as they are and must answer as
// the plugin's __complete command.
const completeName = "kubectl_complete-lpu"

func main() {
	if err := run(argsFor(os.Args[0], os.Args[1:]), os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

// argsFor is the command line to run for the program invoked as argv0
// with args: as kubectl_complete-lpu (a link to the binary), the
// completion request.
func argsFor(argv0 string, args []string) []string {
	if filepath.Base(argv0) == completeName {
		return append([]string{cobra.ShellCompRequestCmd}, args...)
	}
	return args
}

// run executes the command line args, printing to out and warnings to
// errOut.
func run(args []string, out, errOut io.Writer) error {
	root := newRoot(out, errOut)
	root.SetArgs(args)
	return root.Execute()
}

// Package cli is lpu-dra's command line: flags, their environment twins,
// and how they override the config file.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/hyperaccel/lpu-node/config"
	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/flagenv"
)

// Defaults of the kubelet plugin paths.
const (
	DefaultPluginDir   = "/var/lib/kubelet/plugins/lpu.hyperaccel.ai"
	DefaultRegistryDir = "/var/lib/kubelet/plugins_registry"
)

// Options are the command line of lpu-dra after flags and their
// environment twins were read.
type Options struct {
	ConfigFile  string
	NodeName    string
	Kubeconfig  string // "" means in-cluster config
	Root        string
	StateDir    string
	CDIDir      string
	PluginDir   string
	RegistryDir string
	MetricsAddr string
	Simulate    int
	Version     bool

	given map[string]bool
}

var specs = flagenv.Flags{
	{Name: "config", Env: "LPU_CONFIG", Usage: "config `FILE` (YAML, version: v1); empty: built-in defaults"},
	{Name: "node-name", Env: "NODE_NAME", Usage: "this node's `NAME` (required); also the name of the driver's resource pool"},
	{Name: "kubeconfig", Env: "KUBECONFIG", Usage: "kubeconfig `FILE` for the API server; empty: in-cluster config"},
	{Name: "root", Env: "LPU_ROOT", Usage: "host root `DIR` to discover devices under (/sys, /dev); overrides config root (default /)"},
	{Name: "state-dir", Env: "LPU_STATE_DIR", Usage: "`DIR` for the prepared-claims checkpoint; overrides config stateDir (default " + config.DefaultStateDir + ")"},
	{Name: "cdi-dir", Env: "LPU_CDI_DIR", Usage: "`DIR` for the per-claim CDI specs; overrides config cdi.specDir (default " + config.DefaultCDISpecDir + ")"},
	{Name: "plugin-dir", Env: "LPU_PLUGIN_DIR", Usage: "kubelet plugin `DIR` for the driver's socket (default " + DefaultPluginDir + ")"},
	{Name: "registry-dir", Env: "LPU_REGISTRY_DIR", Usage: "kubelet plugin registry `DIR` (default " + DefaultRegistryDir + ")"},
	{Name: "metrics-addr", Env: "LPU_METRICS_ADDR", Usage: "`HOST:PORT` serving /metrics, /healthz, /readyz; empty disables; overrides config metrics.address"},
	{Name: "simulate", Env: "LPU_SIMULATE", Usage: "serve `N` simulated LPUs (rings of 8) from a tree written under <state-dir>/simulated-node; 0 uses real hardware"},
}

const intro = `lpu-dra is the kubelet DRA driver (lpu.hyperaccel.ai) for LPUs: it publishes
every ring arc as a device, so the scheduler hands out ring-contiguous arcs,
and prepares claims as per-claim CDI specs.

Usage:
  lpu-dra [--config FILE] --node-name NAME [--kubeconfig FILE] [--root DIR]
          [--state-dir DIR] [--cdi-dir DIR] [--plugin-dir DIR] [--registry-dir DIR]
          [--metrics-addr HOST:PORT] [--simulate N] [--version] [--help]

Every flag but --version has an environment twin (in brackets). Precedence:
flag > environment > config file > built-in default.

Flags:
`

const outro = `
lpu-dra refuses to start while lpu-device-plugin serves the node (its socket
in the config's kubelet.devicePluginDir answers): one mode per node.

Endpoints (--metrics-addr):
  /metrics  Prometheus metrics
  /healthz  200 while registered with the kubelet
  /readyz   200 once devices were discovered and slices published
`

// Usage writes the help text.
func Usage(w io.Writer) {
	fmt.Fprint(w, intro)
	specs.PrintFlags(w, newFlagSet(&Options{}), nil)
	fmt.Fprint(w, outro)
}

func newFlagSet(o *Options) *flag.FlagSet {
	fs := flag.NewFlagSet("lpu-dra", flag.ContinueOnError)
	fs.StringVar(&o.ConfigFile, "config", "", specs.Usage("config"))
	fs.StringVar(&o.NodeName, "node-name", "", specs.Usage("node-name"))
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", specs.Usage("kubeconfig"))
	fs.StringVar(&o.Root, "root", "", specs.Usage("root"))
	fs.StringVar(&o.StateDir, "state-dir", "", specs.Usage("state-dir"))
	fs.StringVar(&o.CDIDir, "cdi-dir", "", specs.Usage("cdi-dir"))
	fs.StringVar(&o.PluginDir, "plugin-dir", DefaultPluginDir, specs.Usage("plugin-dir"))
	fs.StringVar(&o.RegistryDir, "registry-dir", DefaultRegistryDir, specs.Usage("registry-dir"))
	fs.StringVar(&o.MetricsAddr, "metrics-addr", "", specs.Usage("metrics-addr"))
	fs.IntVar(&o.Simulate, "simulate", 0, specs.Usage("simulate"))
	fs.BoolVar(&o.Version, "version", false, "print the version and exit")
	return fs
}

// ErrHelp is returned by Parse for --help.
var ErrHelp = flag.ErrHelp

// Parse reads args, then the environment twins of flags not given.
func Parse(args []string, lookupEnv func(string) (string, bool)) (*Options, error) {
	o := &Options{}
	fs := newFlagSet(o)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q (flags only; see --help)", fs.Arg(0))
	}
	o.given = flagenv.Given(fs)
	if err := specs.FromEnv(fs, o.given, lookupEnv); err != nil {
		return nil, err
	}
	if o.Version {
		return o, nil
	}
	if o.NodeName == "" {
		return nil, errors.New("--node-name (or NODE_NAME) is required")
	}
	if err := device.CheckSimulate(o.Simulate); err != nil {
		return nil, err
	}
	if err := flagenv.RequireAbsolute(fs, o.given, "root", "state-dir", "cdi-dir", "plugin-dir", "registry-dir"); err != nil {
		return nil, err
	}
	return o, nil
}

// Apply overrides the config fields whose flag or env twin was given, then
// validates the result.
func (o *Options) Apply(c *config.Config) error {
	if o.given["root"] {
		c.Root = o.Root
	}
	if o.given["state-dir"] {
		c.StateDir = o.StateDir
	}
	if o.given["cdi-dir"] {
		c.CDI.SpecDir = o.CDIDir
	}
	if o.given["metrics-addr"] {
		c.Metrics.Address = o.MetricsAddr
	}
	if err := c.Validate(); err != nil {
		return fmt.Errorf("config after flags: %w", err)
	}
	return nil
}

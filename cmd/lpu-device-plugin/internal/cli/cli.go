package cli

import (
	"flag"
	"fmt"
	"io"
	"slices"

	"github.com/hyperaccel/lpu-node/cmd/lpu-device-plugin/internal/nfd"
	"github.com/hyperaccel/lpu-node/config"
	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/flagenv"
)

// Options are the command line of lpu-device-plugin after flags and their
// environment twins were read. Fields that override the config file apply
// only when given (Apply).
type Options struct {
	ConfigFile  string
	Root        string
	KubeletDir  string
	StateDir    string
	Injection   string
	MetricsAddr string
	Simulate    int
	// NFDFile is the NFD feature file path; "" disables it.
	NFDFile string
	// NFDFileGiven is true when --nfd-features-file or its env twin was
	// given (otherwise the daemon picks the default by mode).
	NFDFileGiven bool
	Version      bool

	given map[string]bool
}

// specs are the flags with their environment twins.
var specs = flagenv.Flags{
	{Name: "config", Env: "LPU_CONFIG", Usage: "config `FILE` (YAML, version: v1); empty: built-in defaults"},
	{Name: "root", Env: "LPU_ROOT", Usage: "host root `DIR` to discover devices under (/sys, /dev); overrides config root (default /)"},
	{Name: "kubelet-dir", Env: "LPU_KUBELET_DIR", Usage: "`DIR` holding kubelet.sock and the plugin socket; overrides config kubelet.devicePluginDir (default " + config.DefaultDevicePluginDir + ")"},
	{Name: "state-dir", Env: "LPU_STATE_DIR", Usage: "`DIR` with the seal key and lpu-nri's readiness socket; overrides config stateDir (default " + config.DefaultStateDir + ")"},
	{Name: "injection", Env: "LPU_INJECTION", Usage: "injection `MODE` nri|cdi|auto; overrides config injection.mode (default auto: nri when the config's nri.socket exists, else cdi)"},
	{Name: "metrics-addr", Env: "LPU_METRICS_ADDR", Usage: "`HOST:PORT` serving /metrics, /healthz, /readyz; empty disables; overrides config metrics.address"},
	{Name: "simulate", Env: "LPU_SIMULATE", Usage: "serve `N` simulated LPUs (rings of 8) from a tree written under <state-dir>/simulated-node; 0 uses real hardware"},
	{Name: "nfd-features-file", Env: "LPU_NFD_FEATURES_FILE", Usage: "`FILE` for the Node Feature Discovery feature file; empty disables (default " + nfd.DefaultPath + ", or inside the simulated tree with --simulate; the default is skipped when its directory does not exist)"},
}

const intro = `lpu-device-plugin advertises the node's LPUs to the kubelet (device plugin
API v1beta1), hands out ring-contiguous sets, and reports their health.

Usage:
  lpu-device-plugin [--config FILE] [--root DIR] [--kubelet-dir DIR] [--state-dir DIR]
                    [--injection nri|cdi|auto] [--metrics-addr HOST:PORT] [--simulate N]
                    [--nfd-features-file FILE] [--version] [--help]

Every flag but --version has an environment twin (in brackets). Precedence:
flag > environment > config file > built-in default.

Flags:
`

const outro = `
Paths: --kubelet-dir, --state-dir, --nfd-features-file and the config's
nri.socket and kubelet.podResourcesSocket are paths as this process sees
them; only device discovery reads under --root. Every config field is
described in config/example.yaml.

Other environment:
  LPU_LOG_LEVEL   error|warn|info|debug (over the config's log.level; invalid values fall back with a warning)
  LPU_LOG_FORMAT  json|text (over the config's log.format)
  NODE_NAME       node name the seals cover and metrics are labelled with (default: the host name);
                  lpu-nri must see the same name

Endpoints (--metrics-addr):
  /metrics  Prometheus metrics
  /healthz  200 while registered with the kubelet and a ListAndWatch stream is open
  /readyz   200 once devices were discovered (the last discovery succeeded)
`

// Usage writes the help text.
func Usage(w io.Writer) {
	fmt.Fprint(w, intro)
	specs.PrintFlags(w, newFlagSet(&Options{}), nil)
	fmt.Fprint(w, outro)
}

func newFlagSet(o *Options) *flag.FlagSet {
	fs := flag.NewFlagSet("lpu-device-plugin", flag.ContinueOnError)
	fs.StringVar(&o.ConfigFile, "config", "", specs.Usage("config"))
	fs.StringVar(&o.Root, "root", "", specs.Usage("root"))
	fs.StringVar(&o.KubeletDir, "kubelet-dir", "", specs.Usage("kubelet-dir"))
	fs.StringVar(&o.StateDir, "state-dir", "", specs.Usage("state-dir"))
	fs.StringVar(&o.Injection, "injection", "", specs.Usage("injection"))
	fs.StringVar(&o.MetricsAddr, "metrics-addr", "", specs.Usage("metrics-addr"))
	fs.IntVar(&o.Simulate, "simulate", 0, specs.Usage("simulate"))
	fs.StringVar(&o.NFDFile, "nfd-features-file", nfd.DefaultPath, specs.Usage("nfd-features-file"))
	fs.BoolVar(&o.Version, "version", false, "print the version and exit")
	return fs
}

// ErrHelp is returned by Parse for --help; the caller prints Usage and
// exits 0.
var ErrHelp = flag.ErrHelp

// Parse reads args (without the program name), then the environment twins
// of flags not given, through lookupEnv (os.LookupEnv in main). An env var
// set to "" counts as given (so LPU_METRICS_ADDR= disables metrics).
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
	o.NFDFileGiven = o.given["nfd-features-file"]
	if o.given["injection"] && !slices.Contains(config.AllowedInjectionModes, o.Injection) {
		return nil, fmt.Errorf("injection %q: want %s, %s or %s", o.Injection, config.InjectionNRI, config.InjectionCDI, config.InjectionAuto)
	}
	if err := device.CheckSimulate(o.Simulate); err != nil {
		return nil, err
	}
	if err := flagenv.RequireAbsolute(fs, o.given, "root", "kubelet-dir", "state-dir"); err != nil {
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
	if o.given["kubelet-dir"] {
		c.Kubelet.DevicePluginDir = o.KubeletDir
	}
	if o.given["state-dir"] {
		c.StateDir = o.StateDir
	}
	if o.given["injection"] {
		c.Injection.Mode = o.Injection
	}
	if o.given["metrics-addr"] {
		c.Metrics.Address = o.MetricsAddr
	}
	if err := c.Validate(); err != nil {
		return fmt.Errorf("config after flags: %w", err)
	}
	return nil
}

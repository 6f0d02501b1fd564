package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/containerd/nri/pkg/api"

	"github.com/hyperaccel/lpu-node/config"
	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/flagenv"
)

// Commands.
const (
	CmdDaemon      = ""             // lpu-nri [flags]
	CmdCDIGenerate = "cdi generate" // write the spec once
	CmdCDIList     = "cdi list"     // print the device names
	CmdDoctor      = "doctor"       // check the node
)

// DefaultNRIPluginDir is where runtimes keep pre-installed NRI plugins.
const DefaultNRIPluginDir = "/opt/nri/plugins"

// Options is the command line after flags and their environment twins.
type Options struct {
	Command     string
	ConfigFile  string
	Root        string
	StateDir    string
	NRISocket   string
	PluginIdx   string
	Mode        string
	MetricsAddr string
	Simulate    int
	Output      string // cdi generate
	PluginDir   string // doctor
	KubeletDir  string // doctor
	// OtherFingerprints are other nodes' seal key fingerprints (doctor,
	// comma separated): a match is reported as a shared key.
	OtherFingerprints string
	Version           bool

	given map[string]bool
}

// specs are the flags with their environment twins.
var specs = flagenv.Flags{
	{Name: "config", Env: "LPU_CONFIG", Usage: "config `FILE` (YAML, version: v1); empty: built-in defaults"},
	{Name: "root", Env: "LPU_ROOT", Usage: "host root `DIR` to discover devices under (/sys, /dev); overrides config root (default /)"},
	{Name: "state-dir", Env: "LPU_STATE_DIR", Usage: "`DIR` with the seal key and the readiness socket; overrides config stateDir (default " + config.DefaultStateDir + ")"},
	{Name: "nri-socket", Env: "LPU_NRI_SOCKET", Usage: "the runtime's NRI socket `PATH`; overrides config nri.socket (default " + config.DefaultNRISocket + ")"},
	{Name: "plugin-idx", Env: "LPU_PLUGIN_IDX", Usage: "two-digit NRI plugin index `NN` (lower runs earlier); overrides config nri.pluginIndex (default " + config.DefaultPluginIndex + ")"},
	{Name: "mode", Env: "LPU_MODE", Usage: "`MODE` nri|cdi; overrides config injection.mode (default auto: nri when the NRI socket exists at start, else cdi, as lpu-device-plugin decides)"},
	{Name: "metrics-addr", Env: "LPU_METRICS_ADDR", Usage: "`HOST:PORT` serving /metrics, /healthz, /readyz; empty disables; overrides config metrics.address"},
	{Name: "simulate", Env: "LPU_SIMULATE", Usage: "use `N` simulated LPUs (rings of 8) written under <state-dir>/simulated-node, the same node as lpu-device-plugin --simulate N; 0 uses real hardware"},
	{Name: "output", Env: "LPU_CDI_OUTPUT", Usage: "CDI spec `DIR` to write to; overrides config cdi.specDir (default " + config.DefaultCDISpecDir + ")"},
	{Name: "nri-plugin-dir", Env: "LPU_NRI_PLUGIN_DIR", Usage: "the runtime's pre-installed NRI plugin `DIR` (default " + DefaultNRIPluginDir + ")"},
	{Name: "other-fingerprints", Env: "LPU_OTHER_FINGERPRINTS", Usage: "comma separated seal key fingerprints `FP,...` of other nodes (from their doctor output); doctor fails when this node's matches one (a cloned key)"},
	{Name: "kubelet-dir", Env: "LPU_KUBELET_DIR", Usage: "kubelet device plugin `DIR`; overrides config kubelet.devicePluginDir (default " + config.DefaultDevicePluginDir + ")"},
}

// only lists the commands that accept a flag; flags not in it go with
// every command.
var only = map[string][]string{
	"metrics-addr":       {CmdDaemon},
	"output":             {CmdCDIGenerate},
	"nri-plugin-dir":     {CmdDoctor},
	"kubelet-dir":        {CmdDoctor},
	"other-fingerprints": {CmdDoctor},
}

const intro = `lpu-nri injects the LPUs a container was allocated by lpu-device-plugin,
as an NRI plugin inside containerd / CRI-O (default), or keeps a CDI spec
current for runtimes without NRI (--mode cdi).

Usage:
  lpu-nri [--config FILE] [--root DIR] [--state-dir DIR] [--nri-socket PATH]
          [--plugin-idx NN] [--mode nri|cdi] [--metrics-addr HOST:PORT] [--simulate N]
  lpu-nri cdi generate [--root DIR] [--output DIR] [common flags]
  lpu-nri cdi list [--root DIR] [common flags]
  lpu-nri doctor [--nri-plugin-dir DIR] [--kubelet-dir DIR] [--other-fingerprints FP,...] [common flags]
  lpu-nri --help | --version

Every flag but --version has an environment twin (in brackets). Precedence:
flag > environment > config file > built-in default.

Flags:
`

const outro = `
Commands:
  cdi generate  discover the node and write <output>/hyperaccel.ai-lpu.json once
  cdi list      print the CDI device names a runtime resolves (hyperaccel.ai/lpu=lpu0 ... =all)
  doctor        check the node (NRI socket and registration, plugin index, readiness,
                CDI spec, /dev vs sysfs, seal key and its fingerprint, device plugin
                socket); exit 1 on any FAIL

Other environment:
  NODE_NAME       node name the allocation seals are bound to (default: the host name);
                  lpu-device-plugin must see the same name
  LPU_LOG_LEVEL   error|warn|info|debug (over the config's log.level; invalid values fall back with a warning)
  LPU_LOG_FORMAT  json|text (over the config's log.format)

Endpoints (--metrics-addr):
  /metrics  Prometheus metrics (lpu_nri_*)
  /healthz  200 while the process runs
  /readyz   NRI mode: 200 while registered with and synchronized by the runtime;
            CDI mode: 200 while the spec on disk is current
`

// Usage writes the help text.
func Usage(w io.Writer) {
	fmt.Fprint(w, intro)
	specs.PrintFlags(w, newFlagSet(&Options{}), func(name string) string {
		if cmds := only[name]; len(cmds) > 0 {
			return fmt.Sprintf(" (only: %s)", strings.Join(cmdNames(cmds), ", "))
		}
		return ""
	})
	fmt.Fprint(w, outro)
}

// flagsFor returns the flags cmd accepts.
func flagsFor(cmd string) flagenv.Flags {
	var fl flagenv.Flags
	for _, s := range specs {
		if accepts(s.Name, cmd) {
			fl = append(fl, s)
		}
	}
	return fl
}

func cmdNames(cmds []string) []string {
	out := make([]string, len(cmds))
	for i, c := range cmds {
		if c == CmdDaemon {
			c = "daemon"
		}
		out[i] = c
	}
	return out
}

func newFlagSet(o *Options) *flag.FlagSet {
	fs := flag.NewFlagSet("lpu-nri", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	u := specs.Usage
	fs.StringVar(&o.ConfigFile, "config", "", u("config"))
	fs.StringVar(&o.Root, "root", "", u("root"))
	fs.StringVar(&o.StateDir, "state-dir", "", u("state-dir"))
	fs.StringVar(&o.NRISocket, "nri-socket", "", u("nri-socket"))
	fs.StringVar(&o.PluginIdx, "plugin-idx", "", u("plugin-idx"))
	fs.StringVar(&o.Mode, "mode", "", u("mode"))
	fs.StringVar(&o.MetricsAddr, "metrics-addr", "", u("metrics-addr"))
	fs.IntVar(&o.Simulate, "simulate", 0, u("simulate"))
	fs.StringVar(&o.Output, "output", "", u("output"))
	fs.StringVar(&o.PluginDir, "nri-plugin-dir", DefaultNRIPluginDir, u("nri-plugin-dir"))
	fs.StringVar(&o.KubeletDir, "kubelet-dir", "", u("kubelet-dir"))
	fs.StringVar(&o.OtherFingerprints, "other-fingerprints", "", u("other-fingerprints"))
	fs.BoolVar(&o.Version, "version", false, "print the version and exit")
	return fs
}

// ErrHelp is returned by Parse for --help (or -h); print Usage, exit 0.
var ErrHelp = flag.ErrHelp

// Parse reads args (without the program name): global flags, an optional
// command ("cdi generate", "cdi list", "doctor") and its flags, then the
// environment twins of flags not given, through lookupEnv (os.LookupEnv). An
// env var set to "" counts as given (LPU_METRICS_ADDR= disables metrics).
func Parse(args []string, lookupEnv func(string) (string, bool)) (*Options, error) {
	o := &Options{}
	fs := newFlagSet(o)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if rest := fs.Args(); len(rest) > 0 {
		switch {
		case rest[0] == "doctor":
			o.Command, rest = CmdDoctor, rest[1:]
		case rest[0] == "cdi" && len(rest) > 1 && (rest[1] == "generate" || rest[1] == "list"):
			o.Command, rest = "cdi "+rest[1], rest[2:]
		case rest[0] == "cdi":
			return nil, errors.New(`cdi: want "cdi generate" or "cdi list"`)
		default:
			return nil, fmt.Errorf("unknown command %q (see --help)", rest[0])
		}
		// Flags after the command parse into the same set: a second Parse
		// keeps the flags given before the command, and a flag given on
		// both sides takes its later value.
		if err := fs.Parse(rest); err != nil {
			return nil, err
		}
		if fs.NArg() > 0 {
			return nil, fmt.Errorf("unexpected argument %q after %s", fs.Arg(0), o.Command)
		}
	}
	o.given = flagenv.Given(fs)
	if err := flagsFor(o.Command).FromEnv(fs, o.given, lookupEnv); err != nil {
		return nil, err
	}
	for _, s := range specs {
		if o.given[s.Name] && !accepts(s.Name, o.Command) {
			return nil, fmt.Errorf("--%s is only for %s", s.Name, strings.Join(cmdNames(only[s.Name]), ", "))
		}
	}
	if o.given["mode"] && o.Mode != config.InjectionNRI && o.Mode != config.InjectionCDI {
		return nil, fmt.Errorf("mode %q: want %s or %s", o.Mode, config.InjectionNRI, config.InjectionCDI)
	}
	if o.given["plugin-idx"] {
		if err := api.CheckPluginIndex(o.PluginIdx); err != nil {
			return nil, fmt.Errorf("plugin-idx: %w", err)
		}
	}
	if err := device.CheckSimulate(o.Simulate); err != nil {
		return nil, err
	}
	if err := flagenv.RequireAbsolute(fs, o.given, "root", "state-dir", "nri-socket", "output", "nri-plugin-dir", "kubelet-dir"); err != nil {
		return nil, err
	}
	return o, nil
}

// accepts reports whether the flag called name goes with cmd.
func accepts(name, cmd string) bool {
	cmds, ok := only[name]
	return !ok || slices.Contains(cmds, cmd)
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
	if o.given["nri-socket"] {
		c.NRI.Socket = o.NRISocket
	}
	if o.given["plugin-idx"] {
		c.NRI.PluginIndex = o.PluginIdx
	}
	if o.given["mode"] {
		c.Injection.Mode = o.Mode
	}
	if o.given["metrics-addr"] {
		c.Metrics.Address = o.MetricsAddr
	}
	if o.given["output"] {
		c.CDI.SpecDir = o.Output
	}
	if o.given["kubelet-dir"] {
		c.Kubelet.DevicePluginDir = o.KubeletDir
	}
	if err := c.Validate(); err != nil {
		return fmt.Errorf("config after flags: %w", err)
	}
	return nil
}

// ResolveMode turns the configured injection mode into nri or cdi, and says
// why, with the rule lpu-device-plugin applies too (config.ResolveInjection),
// so both daemons agree.
func ResolveMode(c *config.Config) (mode, reason string) {
	return config.ResolveInjection(c.Injection.Mode, c.NRI.Socket)
}

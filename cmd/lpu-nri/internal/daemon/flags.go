package daemon

import (
	"fmt"
	"io"

	"github.com/containerd/nri/pkg/api"

	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/doctor"
	"github.com/hyperaccel/lpu-node/config"
	"github.com/hyperaccel/lpu-node/internal/cmdline"
	"github.com/hyperaccel/lpu-node/internal/startup"
	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/device/devicesim"
)

// Options is the command line after flags and their environment twins;
// flags that override the config file land there instead
// (cmdline.Command.Apply).
type Options struct {
	startup.Flags
	PluginDir string // doctor: the runtime's pre-installed NRI plugin dir
	// OtherFingerprints are other nodes' seal key fingerprints (doctor,
	// comma separated): a match is reported as a shared key.
	OtherFingerprints string
	// LPUs and Backend: the size and layout of the tree to write.
	LPUs    int
	Backend string

	nriSocket, pluginIdx, mode, output string
}

// Commands are lpu-nri's commands, each with its own flags: the daemon
// (the program itself) and its one-shot commands.
type Commands struct {
	Daemon, CDIGenerate, CDIList, Doctor, Simulate *cmdline.Command
}

// All returns the commands, the daemon first (as cmdline.Parse wants).
func (c Commands) All() []*cmdline.Command {
	return []*cmdline.Command{c.Daemon, c.CDIGenerate, c.CDIList, c.Doctor, c.Simulate}
}

// NewCommands declares every command's flags, writing to o.
func NewCommands(o *Options) Commands {
	c := Commands{
		Daemon: cmdline.New(""), CDIGenerate: cmdline.New("cdi generate"),
		CDIList: cmdline.New("cdi list"), Doctor: cmdline.New("doctor"), Simulate: cmdline.New("simulate"),
	}
	for _, cmd := range c.All()[:4] {
		o.common(cmd)
	}
	o.Declare(c.Simulate, "config", "root")
	c.Simulate.Int(&o.LPUs, "lpus", "LPU_SIMULATE_LPUS", 8, "number `N` of LPUs to write (rings of 8)").
		Check(func() error { return devicesim.CheckCount(o.LPUs) })
	c.Simulate.String(&o.Backend, "backend", "LPU_SIMULATE_BACKEND", "", "`LAYOUT` to write: lpu, xilinx (Orion) or pci (Bertha); overrides config simulate.backend (default: discovery.backend)").
		OneOf(device.Backends...).Sets(func(cfg *config.Config) { cfg.Simulate.Backend = o.Backend })
	o.Declare(c.Daemon, "metrics-addr", "version")
	c.CDIGenerate.String(&o.output, "output", "LPU_CDI_OUTPUT", "", "CDI spec `DIR` to write to; overrides config cdi.specDir (default "+config.DefaultCDISpecDir+")").
		Absolute().Sets(func(cfg *config.Config) { cfg.CDI.SpecDir = o.output })
	c.Doctor.String(&o.PluginDir, "nri-plugin-dir", "LPU_NRI_PLUGIN_DIR", doctor.DefaultPluginDir, "the runtime's pre-installed NRI plugin `DIR` (default "+doctor.DefaultPluginDir+")").
		Absolute()
	o.Declare(c.Doctor, "kubelet-dir")
	c.Doctor.String(&o.OtherFingerprints, "other-fingerprints", "LPU_OTHER_FINGERPRINTS", "", "comma separated seal key fingerprints `FP,...` of other nodes (from their doctor output); doctor fails when this node's matches one (a cloned key)")
	return c
}

// common declares the flags every command takes.
func (o *Options) common(c *cmdline.Command) {
	o.Declare(c, "config", "root", "state-dir")
	c.String(&o.nriSocket, "nri-socket", "LPU_NRI_SOCKET", "", "the runtime's NRI socket `PATH`; overrides config nri.socket (default "+config.DefaultNRISocket+")").
		Absolute().Sets(func(cfg *config.Config) { cfg.NRI.Socket = o.nriSocket })
	c.String(&o.pluginIdx, "plugin-idx", "LPU_PLUGIN_IDX", "", "two-digit NRI plugin index `NN` (lower runs earlier); overrides config nri.pluginIndex (default "+config.DefaultPluginIndex+")").
		Check(func() error {
			if err := api.CheckPluginIndex(o.pluginIdx); err != nil {
				return fmt.Errorf("--plugin-idx %q: %w", o.pluginIdx, err)
			}
			return nil
		}).Sets(func(cfg *config.Config) { cfg.NRI.PluginIndex = o.pluginIdx })
	c.String(&o.mode, "mode", "LPU_MODE", "", "`MODE` nri|cdi; overrides config injection.mode (default auto: nri when the NRI socket exists at start, else cdi, as lpu-device-plugin decides)").
		OneOf(config.InjectionNRI, config.InjectionCDI).Sets(func(cfg *config.Config) { cfg.Injection.Mode = o.mode })
}

const intro = `lpu-nri injects the LPUs a container was allocated by lpu-device-plugin,
as an NRI plugin inside containerd / CRI-O (default), or keeps a CDI spec
current for runtimes without NRI (--mode cdi).

Usage:
  lpu-nri [--config FILE] [--root DIR] [--state-dir DIR] [--nri-socket PATH]
          [--plugin-idx NN] [--mode nri|cdi] [--metrics-addr HOST:PORT]
  lpu-nri cdi generate [--root DIR] [--output DIR] [common flags]
  lpu-nri cdi list [--root DIR] [common flags]
  lpu-nri doctor [--nri-plugin-dir DIR] [--kubelet-dir DIR] [--other-fingerprints FP,...] [common flags]
  lpu-nri simulate --root DIR [--lpus N] [--backend lpu|xilinx|pci] [--config FILE]
  lpu-nri guard --state-dir DIR
  lpu-nri check [--lpus N] [--dev DIR]
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
  simulate      write a simulated node of N LPUs under --root (plain files for device
                nodes, and a marker that lets discovery accept them), then exit; run the
                daemons with that --root to serve it without LPUs. Writes only into a
                missing or empty directory or an earlier one; idempotent
  guard         the runtime guard's OCI hook (security.runtimeGuard), run by the runtime
                from the CDI spec lpu-nri writes: reads the container state on stdin and
                exits 1 unless lpu-nri verified the container; takes only --state-dir
  check         run inside a container that asked for N LPUs (the chart's helm test
                pod): NUM_LPU_DEVICES and LPU_VISIBLE_DEVICES name N LPUs and the
                injected /dev nodes open (the device cgroup grants them); exit 1 if not

Other environment:
  NODE_NAME       node name the allocation seals are bound to (default: the host name);
                  lpu-device-plugin must see the same name
  HOST_IPS        the node's IP addresses, comma separated (the chart sets status.hostIPs): with
                  loopback and the pod's gateways, the addresses the metrics port keeps
                  4 connection slots for, apart from the pod network's 64 (the kubelet probes from there)
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
	cmdline.PrintFlags(w, NewCommands(&Options{}).All()...)
	fmt.Fprint(w, outro)
}

// ResolveMode turns the configured injection mode into nri or cdi, and says
// why, with the rule lpu-device-plugin applies too (config.ResolveInjection),
// so both daemons agree.
func ResolveMode(c *config.Config) (mode, reason string) {
	return config.ResolveInjection(c.Injection.Mode, c.NRI.Socket)
}

package startup

import (
	"fmt"

	"github.com/hyperaccel/lpu-node/config"
	"github.com/hyperaccel/lpu-node/internal/cmdline"
	"github.com/hyperaccel/lpu-node/internal/nfd"
)

// Flags holds the values of the flags the daemons share. Flags that
// override a config field (--root, --state-dir, --kubelet-dir,
// --metrics-addr) land in the config (cmdline.Command.Apply); the others
// are read here.
type Flags struct {
	ConfigFile string // --config
	Version    bool   // --version

	root, stateDir, kubeletDir, metricsAddr string
}

// shared declares each shared flag once: name, twin, default, usage and
// where its value goes.
var shared = map[string]func(c *cmdline.Command, f *Flags){
	"config": func(c *cmdline.Command, f *Flags) {
		c.String(&f.ConfigFile, "config", "LPU_CONFIG", "", "config `FILE` (YAML, version: v1); empty: built-in defaults")
	},
	"root": func(c *cmdline.Command, f *Flags) {
		c.String(&f.root, "root", "LPU_ROOT", "", "host root `DIR` to discover devices under (/sys, /dev); overrides config root (default /)").
			Absolute().Sets(func(cfg *config.Config) { cfg.Root = f.root })
	},
	"state-dir": func(c *cmdline.Command, f *Flags) {
		c.String(&f.stateDir, "state-dir", "LPU_STATE_DIR", "", "`DIR` with the seal key and lpu-nri's readiness socket; overrides config stateDir (default "+config.DefaultStateDir+")").
			Absolute().Sets(func(cfg *config.Config) { cfg.StateDir = f.stateDir })
	},
	"kubelet-dir": func(c *cmdline.Command, f *Flags) {
		c.String(&f.kubeletDir, "kubelet-dir", "LPU_KUBELET_DIR", "", "kubelet device plugin `DIR` (kubelet.sock and the plugin socket); overrides config kubelet.devicePluginDir (default <kubelet.rootDir>/device-plugins, /var/lib/kubelet/device-plugins)").
			Absolute().Sets(func(cfg *config.Config) { cfg.Kubelet.DevicePluginDir = f.kubeletDir })
	},
	"metrics-addr": func(c *cmdline.Command, f *Flags) {
		c.String(&f.metricsAddr, "metrics-addr", "LPU_METRICS_ADDR", "", "`HOST:PORT` serving /metrics, /healthz, /readyz; empty disables; overrides config metrics.address").
			Sets(func(cfg *config.Config) { cfg.Metrics.Address = f.metricsAddr })
	},
	"version": func(c *cmdline.Command, f *Flags) {
		c.Bool(&f.Version, "version", "", "print the version and exit").Exits()
	},
}

// Declare adds the shared flags called names to c; a daemon lists the ones
// each of its commands takes, and several commands may share one Flags.
// An unknown name is a programming error and panics at start-up.
func (f *Flags) Declare(c *cmdline.Command, names ...string) {
	for _, n := range names {
		decl, ok := shared[n]
		if !ok {
			panic(fmt.Sprintf("startup: no shared flag %q", n))
		}
		decl(c, f)
	}
}

// DeclareNFD adds --nfd-features-file (twin LPU_NFD_FEATURES_FILE) to c,
// parsed into f.
func DeclareNFD(c *cmdline.Command, f *nfd.Flag) {
	c.String(&f.File, "nfd-features-file", "LPU_NFD_FEATURES_FILE", nfd.DefaultPath, "`FILE` for the Node Feature Discovery feature file; empty disables (default "+nfd.DefaultPath+", inside the root when it is a marked tree; the default is skipped when its directory does not exist)").
		MarkGiven(&f.Given)
}

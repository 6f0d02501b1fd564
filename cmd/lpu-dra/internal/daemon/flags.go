package daemon

import (
	"cmp"
	"fmt"
	"io"

	"github.com/hyperaccel/lpu-node/config"
	"github.com/hyperaccel/lpu-node/internal/cmdline"
	"github.com/hyperaccel/lpu-node/internal/nfd"
	"github.com/hyperaccel/lpu-node/internal/startup"
)

// Options are lpu-dra's command line after flags and their environment
// twins were read; --root, --state-dir, --cdi-dir and --metrics-addr land
// in the config instead (cmdline.Command.Apply).
type Options struct {
	startup.Flags
	NodeName    string
	Kubeconfig  string   // "" means in-cluster config
	PluginDir   string   // "": <kubelet.rootDir>/plugins/lpu.hyperaccel.ai
	RegistryDir string   // "": <kubelet.rootDir>/plugins_registry
	NFD         nfd.Flag // --nfd-features-file
	// PodUID is this pod's UID (the chart passes it from the downward
	// API): set, lpu-dra runs in rolling-update mode, beside the other pod
	// of a DaemonSet surge; empty, it expects to be the node's only one.
	PodUID string

	cdiDir string
}

// Command declares lpu-dra's flags, writing to o.
func Command(o *Options) *cmdline.Command {
	c := cmdline.New("")
	o.Declare(c, "config")
	c.String(&o.NodeName, "node-name", "NODE_NAME", "", "this node's `NAME` (required); also the name of the driver's resource pool").Required()
	c.String(&o.Kubeconfig, "kubeconfig", "KUBECONFIG", "", "kubeconfig `FILE` for the API server; empty: in-cluster config")
	o.Declare(c, "root", "state-dir")
	c.String(&o.cdiDir, "cdi-dir", "LPU_CDI_DIR", "", "`DIR` for the per-claim CDI specs; overrides config cdi.specDir (default "+config.DefaultCDISpecDir+")").
		Absolute().Sets(func(cfg *config.Config) { cfg.CDI.SpecDir = o.cdiDir })
	c.String(&o.PluginDir, "plugin-dir", "LPU_PLUGIN_DIR", "", "kubelet plugin `DIR` for the driver's socket (default <kubelet.rootDir>/plugins/lpu.hyperaccel.ai, /var/lib/kubelet/plugins/lpu.hyperaccel.ai)").Absolute()
	c.String(&o.PodUID, "pod-uid", "POD_UID", "", "this pod's `UID`; set, two lpu-dra pods may serve the node at once during a rolling update (registration sockets per pod, checkpoint changes under a lock)")
	c.String(&o.RegistryDir, "registry-dir", "LPU_REGISTRY_DIR", "", "kubelet plugin registry `DIR` (default <kubelet.rootDir>/plugins_registry, /var/lib/kubelet/plugins_registry)").Absolute()
	o.Declare(c, "metrics-addr")
	startup.DeclareNFD(c, &o.NFD)
	o.Declare(c, "version")
	return c
}

// KubeletDirs are the driver's kubelet plugin and registry dirs: the flags
// when given, else their place under the config's kubelet.rootDir.
func (o *Options) KubeletDirs(cfg *config.Config) (pluginDir, registryDir string) {
	return cmp.Or(o.PluginDir, cfg.Kubelet.DRAPluginDir()), cmp.Or(o.RegistryDir, cfg.Kubelet.RegistryDir())
}

const intro = `lpu-dra is the kubelet DRA driver (lpu.hyperaccel.ai) for LPUs: it publishes
every ring arc as a device, so the scheduler hands out ring-contiguous arcs,
and prepares claims as per-claim CDI specs.

Usage:
  lpu-dra [--config FILE] --node-name NAME [--kubeconfig FILE] [--root DIR]
          [--state-dir DIR] [--cdi-dir DIR] [--plugin-dir DIR] [--registry-dir DIR]
          [--pod-uid UID] [--metrics-addr HOST:PORT]
          [--nfd-features-file FILE]
          [--version] [--help]

Every flag but --version has an environment twin (in brackets). Precedence:
flag > environment > config file > built-in default.

Flags:
`

const outro = `
--state-dir holds lpu-dra's checkpoint of prepared claims (dra-checkpoint.json),
its lock (dra-checkpoint.lock) and the journal of lock holds (dra-lock.log).
--nfd-features-file is the device plugin's flag: the same file, the same
content, so NFD labels a DRA node as it labels a device-plugin node.
lpu-dra refuses to start while lpu-device-plugin serves the node (its socket
in the config's kubelet.devicePluginDir answers): one mode per node.

HOST_IPS (the node's IP addresses, comma separated; the chart sets
status.hostIPs), loopback and the pod's gateways get 4 connection slots on
the metrics port apart from the pod network's 64: the kubelet probes from there.

Endpoints (--metrics-addr):
  /metrics  Prometheus metrics
  /healthz  200 while registered with the kubelet
  /readyz   200 once devices were discovered and the kubelet plugin started
`

// Usage writes the help text.
func Usage(w io.Writer) {
	fmt.Fprint(w, intro)
	cmdline.PrintFlags(w, Command(&Options{}))
	fmt.Fprint(w, outro)
}

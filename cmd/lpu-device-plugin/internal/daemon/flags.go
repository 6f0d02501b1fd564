package daemon

import (
	"fmt"
	"io"

	"github.com/hyperaccel/lpu-node/config"
	"github.com/hyperaccel/lpu-node/internal/cmdline"
	"github.com/hyperaccel/lpu-node/internal/nfd"
	"github.com/hyperaccel/lpu-node/internal/startup"
)

// Options are the command line of lpu-device-plugin after flags and their
// environment twins were read; flags that override the config file land
// there instead (cmdline.Command.Apply).
type Options struct {
	startup.Flags
	NFD nfd.Flag // --nfd-features-file
	// Kubeconfig is the kubeconfig file for reading the node's cordoned
	// LPUs; empty: cordons are not followed.
	Kubeconfig string

	injection string
}

// Command declares lpu-device-plugin's flags, writing to o.
func Command(o *Options) *cmdline.Command {
	c := cmdline.New("")
	o.Declare(c, "config", "root", "kubelet-dir", "state-dir")
	c.String(&o.injection, "injection", "LPU_INJECTION", "", "injection `MODE` nri|cdi|auto; overrides config injection.mode (default auto: nri when the config's nri.socket exists, else cdi)").
		OneOf(config.AllowedInjectionModes...).Sets(func(cfg *config.Config) { cfg.Injection.Mode = o.injection })
	o.Declare(c, "metrics-addr")
	c.String(&o.Kubeconfig, "kubeconfig", "KUBECONFIG", "", "kubeconfig `FILE` for reading this node's cordoned LPUs (kubectl lpu cordon); empty: cordons are not followed")
	startup.DeclareNFD(c, &o.NFD)
	o.Declare(c, "version")
	return c
}

const intro = `lpu-device-plugin advertises the node's LPUs to the kubelet (device plugin
API v1beta1), hands out ring-contiguous sets, and reports their health.

Usage:
  lpu-device-plugin [--config FILE] [--root DIR] [--kubelet-dir DIR] [--state-dir DIR]
                    [--injection nri|cdi|auto] [--metrics-addr HOST:PORT]
                    [--kubeconfig FILE] [--nfd-features-file FILE] [--version] [--help]

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
  NODE_NAME       node name the seals cover, metrics are labelled with and whose Node annotation
                  lpu.hyperaccel.ai/cordoned lists LPUs reported Unhealthy (default: the host name);
                  lpu-nri must see the same name
  HOST_IPS        the node's IP addresses, comma separated (the chart sets status.hostIPs): with
                  loopback and the pod's gateways, the addresses the metrics port keeps
                  4 connection slots for, apart from the pod network's 64 (the kubelet probes from there)

Endpoints (--metrics-addr):
  /metrics  Prometheus metrics
  /healthz  200 while registered with the kubelet and a ListAndWatch stream is open
  /readyz   200 once devices were discovered (the last discovery succeeded)
`

// Usage writes the help text.
func Usage(w io.Writer) {
	fmt.Fprint(w, intro)
	cmdline.PrintFlags(w, Command(&Options{}))
	fmt.Fprint(w, outro)
}

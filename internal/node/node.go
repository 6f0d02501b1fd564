package node

import (
	"cmp"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"github.com/hyperaccel/lpu-node/config"
	"github.com/hyperaccel/lpu-node/internal/health"
	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/device/devicesim"
	"github.com/hyperaccel/lpu-node/pkg/inject"
)

// Options say how to open the node.
type Options struct {
	// Simulate > 0 writes (or keeps) the simulated node of that many LPUs
	// under <stateDir>/simulated-node and discovers there (--simulate).
	Simulate int
	// Name is the node's name when the command line gave it (lpu-dra's
	// --node-name); empty reads NODE_NAME through Getenv, then the host
	// name (inject.NodeName).
	Name string
	// Getenv reads NODE_NAME; nil means os.Getenv.
	Getenv func(string) string
	// Kubelet says the command talks to the kubelet: Open then fails when
	// the config names a kubelet.rootDir that does not exist
	// (config.Kubelet.CheckRoot).
	Kubelet bool
	// Logger receives the node's start-up lines; nil discards them.
	Logger *slog.Logger
}

// Node is the assembled node. Its fields are set by Open and not changed
// after.
type Node struct {
	// Config is the configuration the node was opened with.
	Config *config.Config
	// Root is the root devices are discovered under: cfg.Root, or the
	// simulated tree.
	Root string
	// Simulated is true under --simulate.
	Simulated bool
	// Discoverer discovers the node's LPUs under Root with the configured
	// (or, simulated, simulate.backend's) discovery.
	Discoverer *device.Sysfs
	// Inject is what reaches an LPU container besides its devices: the
	// configured mounts that exist (from the simulated tree when it holds
	// them) and env.
	Inject inject.Options

	opts Options
	log  *slog.Logger

	keyOnce sync.Once
	key     *inject.Key
	keyErr  error
}

// Open assembles the node from cfg (after the flags were laid over it).
// It fails when the discovery root is not a directory (a typo there would
// otherwise serve an empty node), when the simulated node cannot be
// written or, with o.Kubelet, when a named kubelet root does not exist.
func Open(cfg *config.Config, o Options) (*Node, error) {
	log := cmp.Or(o.Logger, slog.New(slog.DiscardHandler))
	if o.Simulate <= 0 {
		// The simulated node is its own root; the configured one is not read.
		if err := config.CheckDir("root", cfg.Root); err != nil {
			return nil, err
		}
	}
	if o.Kubelet {
		if err := cfg.Kubelet.CheckRoot(); err != nil {
			return nil, err
		}
	}
	n := &Node{Config: cfg, Root: cfg.Root, Simulated: o.Simulate > 0, opts: o, log: log}
	if n.Simulated {
		root, err := devicesim.WriteNode(cfg.StateDir, o.Simulate, cfg.Simulate.Backend)
		if err != nil {
			return nil, err
		}
		n.Root = root
		spec := devicesim.SpecFor(o.Simulate)
		log.Info("serving a simulated node", "root", root, "devices", spec.Devices, "rings", spec.Rings, "backend", cfg.Simulate.Backend)
	}
	n.Discoverer = device.NewSysfs(n.Root, append(cfg.DiscoveryOptions(n.Simulated), device.WithLogger(log))...)
	n.Inject = injectOptions(cfg, n.simRoot(), log)
	return n, nil
}

// simRoot is the simulated tree, or "" on real hardware.
func (n *Node) simRoot() string {
	if !n.Simulated {
		return ""
	}
	return n.Root
}

// DiscoveryOptions are the discovery options the Discoverer was built
// with, for a command that builds its own (doctor).
func (n *Node) DiscoveryOptions() []device.Option {
	return n.Config.DiscoveryOptions(n.Simulated)
}

// HealthOptions are the health monitor's options from the config's health
// section, logging to the node's logger.
func (n *Node) HealthOptions() health.Options {
	h := n.Config.Health
	return health.Options{
		ResyncInterval:    h.ResyncInterval.Duration,
		PollInterval:      h.PollInterval.Duration,
		ProbeInterval:     h.ProbeInterval.Duration,
		FailureThreshold:  h.FailureThreshold,
		RecoveryThreshold: h.RecoveryThreshold,
		Logger:            n.log,
	}
}

// Name is the node's name: Options.Name, else NODE_NAME, else the host
// name. The name is returned with the error when it is set but not a
// valid node name (inject.NodeName), so a caller that only labels metrics
// with it may go on.
func (n *Node) Name() (string, error) {
	if n.opts.Name != "" {
		return n.opts.Name, inject.CheckNodeName(n.opts.Name)
	}
	getenv := n.opts.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	return inject.NodeName(getenv)
}

// SealKey loads (or on first use creates) the seal key in the state dir
// and binds it to Name: seals made on another node that shares the key (a
// cloned image) do not open here. It is read once; later calls return the
// same key or error.
func (n *Node) SealKey() (*inject.Key, error) {
	n.keyOnce.Do(func() { n.key, n.keyErr = n.loadKey() })
	return n.key, n.keyErr
}

func (n *Node) loadKey() (*inject.Key, error) {
	name, err := n.Name()
	if err != nil {
		return nil, err
	}
	k, err := inject.LoadOrCreateKey(n.Config.StateDir)
	if err != nil {
		return nil, err
	}
	return k.ForNode(name)
}

// injectOptions returns the mounts and env for LPU containers. Mounts whose
// host path does not exist (under cfg.Root, where this process sees the
// host) are dropped with a warning: the runtime would fail every LPU
// container on them. With a simulated node (simRoot != "") a mount whose
// host path exists inside the simulated tree is taken from there, so the
// simulated driver library and tool reach the container; such a mount was
// found where this process sees the state dir (the same path as on the
// host), so it is not looked for again under cfg.Root.
func injectOptions(cfg *config.Config, simRoot string, log *slog.Logger) inject.Options {
	var kept []inject.Mount
	var missing []string
	for _, m := range cfg.Injection.Mounts {
		im := inject.Mount{HostPath: m.HostPath, ContainerPath: m.ContainerPath}
		if im.ContainerPath == "" {
			im.ContainerPath = im.HostPath
		}
		if simRoot != "" {
			if p := filepath.Join(simRoot, m.HostPath); exists(p) {
				im.HostPath = p
				kept = append(kept, im)
				continue
			}
		}
		k, miss := inject.ExistingMounts(cfg.Root, []inject.Mount{im})
		kept, missing = append(kept, k...), append(missing, miss...)
	}
	if len(missing) > 0 {
		log.Warn("driver mounts missing on the host; not injecting them", "paths", missing, "root", cfg.Root)
	}
	return inject.Options{Mounts: kept, Env: cfg.Injection.Env}
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

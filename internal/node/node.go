package node

import (
	"cmp"
	"log/slog"
	"os"

	"sync"

	"github.com/hyperaccel/lpu-node/config"
	"github.com/hyperaccel/lpu-node/internal/health"
	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/inject"
)

// Options say how to open the node.
type Options struct {
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
	// Root is the root devices are discovered under: cfg.Root.
	Root string
	// Discoverer discovers the node's LPUs under Root with the configured
	// discovery.
	Discoverer *device.Sysfs
	// Inject is what reaches an LPU container besides its devices: the
	// configured mounts that exist (from the tree itself when Root is a
	// marked tree, device.TreePath) and env.
	Inject inject.Options

	opts Options
	log  *slog.Logger

	keyOnce sync.Once
	key     *inject.Key
	keyErr  error
}

// Open assembles the node from cfg (after the flags were laid over it).
// It fails when the discovery root is not a directory (a typo there would
// otherwise serve an empty node) or, with o.Kubelet, when a named kubelet
// root does not exist.
func Open(cfg *config.Config, o Options) (*Node, error) {
	log := cmp.Or(o.Logger, slog.New(slog.DiscardHandler))
	if err := config.CheckDir("root", cfg.Root); err != nil {
		return nil, err
	}
	if o.Kubelet {
		if err := cfg.Kubelet.CheckRoot(); err != nil {
			return nil, err
		}
	}
	n := &Node{Config: cfg, Root: cfg.Root, opts: o, log: log}
	n.Discoverer = device.NewSysfs(n.Root, append(cfg.DiscoveryOptions(), device.WithLogger(log))...)
	n.Inject = injectOptions(cfg, log)
	return n, nil
}

// DiscoveryOptions are the discovery options the Discoverer was built
// with, for a command that builds its own (doctor).
func (n *Node) DiscoveryOptions() []device.Option {
	return n.Config.DiscoveryOptions()
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
// container on them. When the root is a marked tree (device.TreePath) a
// mount whose host path exists inside it is taken from there, so the
// tree's driver library and tool reach the container.
func injectOptions(cfg *config.Config, log *slog.Logger) inject.Options {
	var kept []inject.Mount
	var missing []string
	for _, m := range cfg.Injection.Mounts {
		im := inject.Mount{HostPath: m.HostPath, ContainerPath: m.ContainerPath}
		if im.ContainerPath == "" {
			im.ContainerPath = im.HostPath
		}
		if p, ok := device.TreePath(cfg.Root, m.HostPath); ok && exists(p) {
			im.HostPath = p
			kept = append(kept, im)
			continue
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

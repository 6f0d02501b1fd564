package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/hyperaccel/lpu-node/cmd/lpu-device-plugin/internal/metrics"
	"github.com/hyperaccel/lpu-node/cmd/lpu-device-plugin/internal/plugin"
	"github.com/hyperaccel/lpu-node/config"
	"github.com/hyperaccel/lpu-node/internal/health"
	"github.com/hyperaccel/lpu-node/internal/metricsserver"
	"github.com/hyperaccel/lpu-node/internal/nfd"
	"github.com/hyperaccel/lpu-node/internal/node"
	"github.com/hyperaccel/lpu-node/internal/podresources"
	"github.com/hyperaccel/lpu-node/internal/startup"
	"github.com/hyperaccel/lpu-node/pkg/cordon"
	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/inject"
)

// Params is everything Run needs.
type Params struct {
	Config  *config.Config // after flags were applied
	Options *Options
	Logger  *slog.Logger
	Version string
}

// Run builds the daemon's parts from the config and runs them until ctx
// ends: the health monitor, the device plugin with its registration loop,
// the metrics endpoint, the NFD feature file and, when configured, traces. It returns nil on
// cancellation and an error only when a part cannot start (an unusable
// state directory in nri mode, a taken metrics address, a root that is
// not a directory, a named kubelet root that does not exist).
func Run(ctx context.Context, p Params) error {
	cfg, opts, log := p.Config, p.Options, startup.Logger(p.Logger)
	n, err := node.Open(cfg, node.Options{Kubelet: true, Logger: log})
	if err != nil {
		return err
	}
	mode, why := config.ResolveInjection(cfg.Injection.Mode, cfg.NRI.Socket)
	name, key, err := nodeKey(n, mode, log)
	if err != nil {
		return err
	}
	log.Info("starting lpu-device-plugin", "version", p.Version, "node", name, "resource", cfg.ResourceName,
		"root", n.Root, "kubeletDir", cfg.Kubelet.DevicePluginDir, "stateDir", cfg.StateDir,
		"injection", mode, "injectionReason", why, "policy", cfg.Allocation.Policy)

	// One mode per node: never serve LPUs lpu-dra already serves. It
	// registers in the kubelet root's registry, or (the kubelet dir given
	// on its own, as before kubelet.rootDir) next to the device plugin dir.
	if err := node.RefuseIfDRA(cfg.Kubelet.RegistryDir(), node.RegistryDir(cfg.Kubelet.DevicePluginDir)); err != nil {
		return err
	}

	// Tracing fails open: a bad endpoint or exporter is logged, never fatal.
	tracer, stopTracing := startup.Tracing(ctx, cfg.Tracing, "lpu-device-plugin", p.Version, log)
	defer stopTracing()

	mon := health.New(n.Discoverer, n.HealthOptions())
	holders := podresources.New(cfg.Kubelet.PodResourcesSocket, cfg.ResourceName)
	defer holders.Close()
	m := newMetrics(p, name, mon, n.Discoverer, holders)
	cordons, src, err := cordoned(mon, opts.Kubeconfig, name, log)
	if err != nil {
		return err
	}
	plug, err := plugin.New(src, plugin.Options{
		ResourceName: cfg.ResourceName, KubeletDir: cfg.Kubelet.DevicePluginDir, StateDir: cfg.StateDir,
		Injection: mode, Policy: cfg.Allocation.Policy, Key: key, RuntimeGuard: cfg.Security.RuntimeGuard,
		Recorder: m, Tracer: tracer, Logger: log,
	})
	if err != nil {
		return err
	}
	err = serve(ctx, cfg, parts{mon: mon, cordons: cordons, src: src, plug: plug, metrics: m}, opts.NFD.Path(n.Root, log), log)
	log.Info("lpu-device-plugin stopped", "err", err)
	return err
}

// cordoned follows the node's cordoned LPUs (pkg/cordon) with a client
// from kubeconfig: the Source the plugin serves then reports them
// Unhealthy, and every LPU until the Node was read. Without a kubeconfig
// (or without a node name) it follows none (nil Watcher, src mon) and says
// so: the in-cluster config is not used yet, because a plugin that cannot
// reach the API server through it would withhold every LPU (fail closed)
// on clusters whose service network does not reach the host; a kubeconfig
// that does not load is an error.
func cordoned(mon *health.Monitor, kubeconfig, node string, log *slog.Logger) (*cordon.Watcher, plugin.Source, error) {
	if node == "" {
		log.Warn("no node name: cordoned LPUs are not followed")
		return nil, mon, nil
	}
	if kubeconfig == "" {
		log.Info("no --kubeconfig: cordoned LPUs are not followed by the device plugin")
		return nil, mon, nil
	}
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, nil, fmt.Errorf("kube client: %w", err)
	}
	w := cordon.NewWatcher(cordon.Options{Client: client, Node: node, Logger: log})
	return w, plugin.NewCordonSource(mon, w, log), nil
}

// nodeKey returns the node's name and, in nri injection, the seal key
// bound to it: the seals cover the node name, so lpu-nri on another node
// that shares the key (a cloned image) cannot open them. Without nri
// injection a bad name only labels the metrics.
func nodeKey(n *node.Node, mode string, log *slog.Logger) (string, *inject.Key, error) {
	name, nameErr := n.Name()
	if mode != config.InjectionNRI {
		if nameErr != nil {
			log.Warn("no usable node name for metric labels", "err", nameErr)
		}
		return name, nil, nil
	}
	key, err := n.SealKey()
	if err != nil {
		return "", nil, fmt.Errorf("seal key for nri injection: %w", err)
	}
	log.Info("seal key loaded", "path", key.Path(), "node", name, "fingerprint", key.Fingerprint())
	return name, key, nil
}

// newMetrics builds the daemon's metrics: the one place its collectors
// and their sources come together.
func newMetrics(p Params, name string, mon *health.Monitor, telemetry *device.Sysfs, holders *podresources.Client) *metrics.Metrics {
	return metrics.New(metrics.Options{
		Node: name, Devices: mon, Telemetry: telemetry, Holders: holders,
		HoldersTimeout: p.Config.Kubelet.PodResourcesTimeout.Duration, Logger: startup.Logger(p.Logger), Version: p.Version,
	})
}

// parts are what serve runs.
type parts struct {
	mon     *health.Monitor
	cordons *cordon.Watcher // nil: no cordoned LPUs followed
	src     plugin.Source   // mon, or a *plugin.CordonSource over it
	plug    *plugin.Plugin
	metrics *metrics.Metrics
}

// serve runs the parts until ctx ends: the monitor, the cordoned-LPU
// watcher, the plugin once the first discovery ran, the metrics endpoint
// and, when nfdFile is set, the NFD feature file.
func serve(ctx context.Context, cfg *config.Config, p parts, nfdFile string, log *slog.Logger) error {
	mon, plug, m := p.mon, p.plug, p.metrics
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return mon.Run(ctx) })
	if cs, ok := p.src.(*plugin.CordonSource); ok {
		g.Go(func() error { return cs.Run(ctx) })
		g.Go(func() error { return p.cordons.Run(ctx) })
	}
	g.Go(func() error {
		select {
		case <-mon.Ready():
		case <-ctx.Done():
			return nil
		}
		return plug.Run(ctx)
	})
	g.Go(func() error {
		return metricsserver.Serve(ctx, cfg.Metrics.Address, metricsserver.Handler(m.Registry, Healthz(plug), Readyz(mon)), log)
	})
	if nfdFile != "" {
		g.Go(func() error { return nfd.Keep(ctx, mon, nfdFile, cfg.ResourceName, log) })
	}
	return g.Wait()
}

// Healthz passes while the plugin is registered and the kubelet holds a
// ListAndWatch stream.
func Healthz(p *plugin.Plugin) metricsserver.Check {
	return func() error {
		switch {
		case !p.Registered():
			return errors.New("not registered with the kubelet")
		case p.Streams() == 0:
			return errors.New("registered, but no ListAndWatch stream from the kubelet")
		}
		return nil
	}
}

// Readyz passes once devices were discovered and the last discovery
// succeeded.
func Readyz(m *health.Monitor) metricsserver.Check {
	return func() error {
		select {
		case <-m.Ready():
		default:
			return errors.New("device discovery has not run yet")
		}
		snap, _ := m.Snapshot()
		if snap.Err != nil {
			return fmt.Errorf("device discovery failing: %w", snap.Err)
		}
		return nil
	}
}

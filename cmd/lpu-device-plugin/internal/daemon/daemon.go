package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"golang.org/x/sync/errgroup"

	"github.com/hyperaccel/lpu-node/cmd/lpu-device-plugin/internal/metrics"
	"github.com/hyperaccel/lpu-node/cmd/lpu-device-plugin/internal/plugin"
	"github.com/hyperaccel/lpu-node/config"
	"github.com/hyperaccel/lpu-node/internal/health"
	"github.com/hyperaccel/lpu-node/internal/nfd"
	"github.com/hyperaccel/lpu-node/internal/nodemode"
	"github.com/hyperaccel/lpu-node/internal/podresources"
	"github.com/hyperaccel/lpu-node/internal/startup"
	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/inject"
)

// Params is everything Run needs.
type Params struct {
	Config  *config.Config // after flags were applied
	Options *Options
	Logger  *slog.Logger
	Version string
	// Getenv reads NODE_NAME; nil means os.Getenv.
	Getenv func(string) string
}

// Run builds the daemon's parts from the config and runs them until ctx
// ends: the health monitor, the device plugin with its registration loop,
// the metrics endpoint, the NFD feature file and, when configured, traces. It returns nil on
// cancellation and an error only when a part cannot start (an unusable
// state directory in nri mode, a taken metrics address, an invalid
// simulation).
func Run(ctx context.Context, p Params) error {
	cfg, opts, log := p.Config, p.Options, startup.Logger(p.Logger)
	root, err := discoveryRoot(cfg, opts.Simulate, log)
	if err != nil {
		return err
	}
	mode, why := config.ResolveInjection(cfg.Injection.Mode, cfg.NRI.Socket)
	node, nodeErr := inject.NodeName(getenvOr(p.Getenv))
	var key *inject.Key
	if mode == config.InjectionNRI {
		// The seals cover the node name: lpu-nri on another node that
		// shares the key (a cloned image) cannot open them.
		if nodeErr != nil {
			return fmt.Errorf("seal key for nri injection: %w", nodeErr)
		}
		k, err := inject.LoadOrCreateKey(cfg.StateDir)
		if err != nil {
			return fmt.Errorf("seal key for nri injection: %w", err)
		}
		if key, err = k.ForNode(node); err != nil {
			return fmt.Errorf("seal key for nri injection: %w", err)
		}
		log.Info("seal key loaded", "path", key.Path(), "node", node, "fingerprint", key.Fingerprint())
	} else if nodeErr != nil {
		log.Warn("no usable node name for metric labels", "err", nodeErr)
	}
	log.Info("starting lpu-device-plugin", "version", p.Version, "node", node, "resource", cfg.ResourceName,
		"root", root, "kubeletDir", cfg.Kubelet.DevicePluginDir, "stateDir", cfg.StateDir,
		"injection", mode, "injectionReason", why, "policy", cfg.Allocation.Policy)

	// One mode per node: never serve LPUs lpu-dra already serves.
	if err := nodemode.RefuseIfDRA(nodemode.RegistryDir(cfg.Kubelet.DevicePluginDir)); err != nil {
		return err
	}

	// Tracing fails open: a bad endpoint or exporter is logged, never fatal.
	tracer, stopTracing := startup.Tracing(ctx, cfg.Tracing, "lpu-device-plugin", p.Version, log)
	defer stopTracing()

	sysfs := device.NewSysfs(root, append(cfg.DiscoveryOptions(opts.Simulate > 0), device.WithLogger(log))...)
	mon := health.New(sysfs, health.Options{
		ResyncInterval:    cfg.Health.ResyncInterval.Duration,
		PollInterval:      cfg.Health.PollInterval.Duration,
		ProbeInterval:     cfg.Health.ProbeInterval.Duration,
		FailureThreshold:  cfg.Health.FailureThreshold,
		RecoveryThreshold: cfg.Health.RecoveryThreshold,
		Logger:            log,
	})
	holders := podresources.New(cfg.Kubelet.PodResourcesSocket, cfg.ResourceName)
	defer holders.Close()
	m := metrics.New(metrics.Options{
		Node: node, Devices: mon, Telemetry: sysfs, Holders: holders,
		HoldersTimeout: cfg.Kubelet.PodResourcesTimeout.Duration, Logger: log, Version: p.Version,
	})
	plug, err := plugin.New(mon, plugin.Options{
		ResourceName: cfg.ResourceName, KubeletDir: cfg.Kubelet.DevicePluginDir, StateDir: cfg.StateDir,
		Injection: mode, Policy: cfg.Allocation.Policy, Key: key,
		Recorder: m, Tracer: tracer, Logger: log,
	})
	if err != nil {
		return err
	}
	err = serve(ctx, cfg, mon, plug, m, opts.NFD.Path(opts.Simulate > 0, root, log), log)
	log.Info("lpu-device-plugin stopped", "err", err)
	return err
}

// discoveryRoot writes the simulated node under --simulate and returns
// the root to discover under.
func discoveryRoot(cfg *config.Config, simulate int, log *slog.Logger) (string, error) {
	if simulate <= 0 {
		return cfg.Root, nil
	}
	root, err := device.SimulateBackendNode(cfg.StateDir, simulate, cfg.Simulate.Backend)
	if err != nil {
		return "", err
	}
	spec := device.SimSpecFor(simulate)
	log.Info("serving a simulated node", "root", root, "devices", spec.Devices, "rings", spec.Rings, "backend", cfg.Simulate.Backend)
	return root, nil
}

// getenvOr is getenv, or os.Getenv when it is nil.
func getenvOr(getenv func(string) string) func(string) string {
	if getenv == nil {
		return os.Getenv
	}
	return getenv
}

// serve runs the parts until ctx ends: the monitor, the plugin once the
// first discovery ran, the metrics endpoint and, when nfdFile is set, the
// NFD feature file.
func serve(ctx context.Context, cfg *config.Config, mon *health.Monitor, plug *plugin.Plugin, m *metrics.Metrics, nfdFile string, log *slog.Logger) error {
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return mon.Run(ctx) })
	g.Go(func() error {
		select {
		case <-mon.Ready():
		case <-ctx.Done():
			return nil
		}
		return plug.Run(ctx)
	})
	g.Go(func() error {
		return m.Serve(ctx, cfg.Metrics.Address, Healthz(plug), Readyz(mon), log)
	})
	if nfdFile != "" {
		g.Go(func() error { return nfd.Keep(ctx, mon, nfdFile, cfg.ResourceName, log) })
	}
	return g.Wait()
}

// Healthz passes while the plugin is registered and the kubelet holds a
// ListAndWatch stream.
func Healthz(p *plugin.Plugin) metrics.Check {
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
func Readyz(m *health.Monitor) metrics.Check {
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

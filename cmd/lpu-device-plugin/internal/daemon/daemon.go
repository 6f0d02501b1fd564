package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"

	"golang.org/x/sync/errgroup"

	"github.com/hyperaccel/lpu-node/cmd/lpu-device-plugin/internal/cli"
	"github.com/hyperaccel/lpu-node/cmd/lpu-device-plugin/internal/health"
	"github.com/hyperaccel/lpu-node/cmd/lpu-device-plugin/internal/metrics"
	"github.com/hyperaccel/lpu-node/cmd/lpu-device-plugin/internal/nfd"
	"github.com/hyperaccel/lpu-node/cmd/lpu-device-plugin/internal/plugin"
	"github.com/hyperaccel/lpu-node/config"
	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/inject"
	"github.com/hyperaccel/lpu-node/pkg/startup"
)

// Params is everything Run needs.
type Params struct {
	Config  *config.Config // after flags were applied
	Options *cli.Options
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
	cfg, opts, log := p.Config, p.Options, p.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	getenv := p.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}

	root := cfg.Root
	if opts.Simulate > 0 {
		r, err := device.SimulateNode(cfg.StateDir, opts.Simulate)
		if err != nil {
			return err
		}
		root = r
		spec := device.SimSpecFor(opts.Simulate)
		log.Info("serving a simulated node", "root", root, "devices", spec.Devices, "rings", spec.Rings)
	}
	t := cfg.Topology
	sysfs := device.NewSysfs(root, device.WithTopology(t.Source, t.Rings, t.NetworkTable), device.WithLogger(log))

	mode, why := config.ResolveInjection(cfg.Injection.Mode, cfg.NRI.Socket)
	node, nodeErr := inject.NodeName(getenv)
	var key *inject.Key
	if mode == plugin.InjectionNRI {
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

	// Tracing fails open: a bad endpoint or exporter is logged, never fatal.
	tracer, stopTracing := startup.Tracing(ctx, cfg.Tracing, "lpu-device-plugin", p.Version, log)
	defer stopTracing()

	mon := health.New(sysfs, health.Options{
		ResyncInterval:    cfg.Health.ResyncInterval.Duration,
		PollInterval:      cfg.Health.PollInterval.Duration,
		ProbeInterval:     cfg.Health.ProbeInterval.Duration,
		FailureThreshold:  cfg.Health.FailureThreshold,
		RecoveryThreshold: cfg.Health.RecoveryThreshold,
		Logger:            log,
	})
	holders := metrics.NewPodResources(cfg.Kubelet.PodResourcesSocket, cfg.ResourceName)
	defer holders.Close()
	m := metrics.New(metrics.Options{
		Node: node, Devices: mon, Telemetry: sysfs, Holders: holders,
		HoldersTimeout: cfg.Kubelet.PodResourcesTimeout.Duration, Logger: log,
	})
	plug, err := plugin.New(mon, plugin.Options{
		ResourceName: cfg.ResourceName,
		KubeletDir:   cfg.Kubelet.DevicePluginDir,
		StateDir:     cfg.StateDir,
		Injection:    mode,
		Policy:       cfg.Allocation.Policy,
		Key:          key,
		Recorder:     m,
		Tracer:       tracer,
		Logger:       log,
	})
	if err != nil {
		return err
	}

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
	if path := nfdPath(opts, root, log); path != "" {
		g.Go(func() error { return writeFeatures(ctx, mon, path, cfg.ResourceName, log) })
	}
	err = g.Wait()
	log.Info("lpu-device-plugin stopped", "err", err)
	return err
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

// nfdPath picks the feature file: the flag when given ("" disables);
// otherwise the default, inside the simulated tree under --simulate, and
// only when its directory exists (NFD installed).
func nfdPath(opts *cli.Options, root string, log *slog.Logger) string {
	if opts.NFDFileGiven {
		return opts.NFDFile
	}
	path := opts.NFDFile
	if opts.Simulate > 0 {
		return filepath.Join(root, path)
	}
	if _, err := os.Stat(filepath.Dir(path)); err != nil {
		log.Info("not writing the NFD feature file: its directory is absent (NFD not installed?)", "file", path)
		return ""
	}
	return path
}

// writeFeatures keeps the NFD feature file in line with the inventory.
func writeFeatures(ctx context.Context, mon *health.Monitor, path, resource string, log *slog.Logger) error {
	select {
	case <-mon.Ready():
	case <-ctx.Done():
		return nil
	}
	var last []string
	lastErr := ""
	written := false
	for {
		snap, changed := mon.Snapshot()
		if lines := nfd.Features(resource, snap.Inventory); !written || !slices.Equal(lines, last) {
			ok, err := nfd.Write(path, lines)
			if err != nil {
				if err.Error() != lastErr {
					log.Warn("cannot write the NFD feature file", "file", path, "err", err)
					lastErr = err.Error()
				}
			} else {
				if ok {
					log.Info("wrote the NFD feature file", "file", path, "features", lines)
				}
				last, written, lastErr = lines, true, ""
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		}
	}
}

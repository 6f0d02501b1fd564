// Package daemon builds lpu-dra's parts from the config and runs them:
// the health monitor, the DRA driver behind the kubelet plugin helper, the
// slice publisher, the metrics endpoint (with the node-level device
// series of internal/devicemetrics) and the NFD feature file.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/hyperaccel/lpu-node/cmd/lpu-dra/internal/driver"
	"github.com/hyperaccel/lpu-node/config"
	"github.com/hyperaccel/lpu-node/internal/devicemetrics"
	"github.com/hyperaccel/lpu-node/internal/health"
	"github.com/hyperaccel/lpu-node/internal/metricsserver"
	"github.com/hyperaccel/lpu-node/internal/nfd"
	"github.com/hyperaccel/lpu-node/internal/nodemode"
	"github.com/hyperaccel/lpu-node/internal/startup"
	"github.com/hyperaccel/lpu-node/pkg/arcslice"
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

// Run serves until ctx ends. It fails at start when the device plugin
// serves the node, the checkpoint is corrupt, the kube client cannot be
// built, the kubelet plugin cannot start or the node's rings cannot be
// published; an API server that is down is retried by the helper while
// prepared claims keep being served.
func Run(ctx context.Context, p Params) error {
	cfg, opts, log := p.Config, p.Options, startup.Logger(p.Logger)
	if err := nodemode.RefuseIfDevicePlugin(filepath.Join(cfg.Kubelet.DevicePluginDir, device.PluginSocketName(cfg.ResourceName))); err != nil {
		return err
	}
	root := cfg.Root
	if opts.Simulate > 0 {
		r, err := device.SimulateBackendNode(cfg.StateDir, opts.Simulate, cfg.Simulate.Backend)
		if err != nil {
			return err
		}
		root = r
		log.Info("serving a simulated node", "root", root, "devices", opts.Simulate, "backend", cfg.Simulate.Backend)
	}
	sysfs := device.NewSysfs(root, append(cfg.DiscoveryOptions(opts.Simulate > 0), device.WithLogger(log))...)

	client, err := kubeClient(opts.Kubeconfig)
	if err != nil {
		return err
	}
	log.Info("starting lpu-dra", "version", p.Version, "node", opts.NodeName, "root", root, "stateDir", cfg.StateDir,
		"cdiDir", cfg.CDI.SpecDir, "pluginDir", opts.PluginDir, "registryDir", opts.RegistryDir)

	tracer, stopTracing := startup.Tracing(ctx, cfg.Tracing, "lpu-dra", p.Version, log)
	defer stopTracing()

	mon := health.New(sysfs, health.Options{
		ResyncInterval:    cfg.Health.ResyncInterval.Duration,
		PollInterval:      cfg.Health.PollInterval.Duration,
		ProbeInterval:     cfg.Health.ProbeInterval.Duration,
		FailureThreshold:  cfg.Health.FailureThreshold,
		RecoveryThreshold: cfg.Health.RecoveryThreshold,
		Logger:            log,
	})
	metrics := driver.NewMetrics(opts.NodeName)
	mounts := make([]inject.Mount, 0, len(cfg.Injection.Mounts))
	for _, m := range cfg.Injection.Mounts {
		mounts = append(mounts, inject.Mount{HostPath: m.HostPath, ContainerPath: m.ContainerPath})
	}
	mounts, missing := inject.ExistingMounts(root, mounts)
	if len(missing) > 0 {
		log.Warn("not mounting driver paths that do not exist", "paths", missing)
	}
	drv, err := driver.New(mon, driver.Options{
		NodeName: opts.NodeName, StateDir: cfg.StateDir, CDIDir: cfg.CDI.SpecDir,
		Inject:   inject.Options{Mounts: mounts, Env: cfg.Injection.Env},
		PCIeRoot: pcieRoot(root), ArcSizes: cfg.DRA.ArcSizes, Metrics: metrics, Tracer: tracer, Logger: log,
	})
	if err != nil {
		return err
	}

	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return mon.Run(ctx) })
	// The node-level reporting of a device-plugin node: device series, NFD file.
	metrics.Registry.MustRegister(devicemetrics.New(devicemetrics.Options{Node: opts.NodeName, Daemon: "lpu-dra", Version: p.Version, Devices: mon, Telemetry: sysfs, Logger: log}))
	if path := opts.NFD.Path(opts.Simulate > 0, root, log); path != "" {
		g.Go(func() error { return nfd.Keep(ctx, mon, path, cfg.ResourceName, log) })
	}
	var helper *kubeletplugin.Helper
	published := make(chan struct{})
	g.Go(func() error {
		select {
		case <-mon.Ready():
		case <-ctx.Done():
			return nil
		}
		drv.Heal()
		if _, err := drv.Resources(); err != nil {
			return err // a node whose rings cannot be published
		}
		for _, dir := range []string{opts.PluginDir, opts.RegistryDir} {
			if err := os.MkdirAll(dir, 0o750); err != nil {
				return fmt.Errorf("create kubelet plugin dir %s: %w", dir, err)
			}
		}
		h, err := kubeletplugin.Start(ctx, drv,
			kubeletplugin.DriverName(arcslice.Driver),
			kubeletplugin.KubeClient(client),
			kubeletplugin.NodeName(opts.NodeName),
			kubeletplugin.RegistrarDirectoryPath(opts.RegistryDir),
			kubeletplugin.PluginDataDirectoryPath(opts.PluginDir),
		)
		if err != nil {
			return fmt.Errorf("start kubelet plugin: %w", err)
		}
		helper = h
		defer h.Stop()
		close(published)
		return drv.RunPublisher(ctx, h)
	})
	if addr := cfg.Metrics.Address; addr != "" {
		healthz := func() error {
			select {
			case <-published:
			default:
				return errors.New("kubelet plugin not started")
			}
			if s := helper.RegistrationStatus(); s == nil || !s.PluginRegistered {
				return errors.New("not registered with the kubelet")
			}
			return nil
		}
		readyz := func() error {
			select {
			case <-published:
				return nil
			default:
				return errors.New("devices not discovered or slices not published yet")
			}
		}
		g.Go(func() error {
			return metricsserver.Serve(ctx, addr, metricsserver.Handler(metrics.Registry, healthz, readyz), log)
		})
	}
	err = g.Wait()
	log.Info("lpu-dra stopped", "err", err)
	return err
}

// kubeClient uses the kubeconfig file, or the in-cluster config when empty.
func kubeClient(kubeconfig string) (kubernetes.Interface, error) {
	var rc *rest.Config
	var err error
	if kubeconfig == "" {
		rc, err = rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("in-cluster kube config (no --kubeconfig given): %w", err)
		}
	} else {
		rc, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
		}
	}
	c, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kube client: %w", err)
	}
	return c, nil
}

// pcieRoot resolves PCIe roots from sysfs under root; "" when unknown.
func pcieRoot(root string) func(string) string {
	mod := deviceattribute.WithFSFromRoot(filepath.Join(root, "sys"))
	return func(busID string) string {
		a, err := deviceattribute.GetPCIeRootAttributeByPCIBusID(busID, mod)
		if err != nil || a.Value.StringValue == nil {
			return ""
		}
		return *a.Value.StringValue
	}
}

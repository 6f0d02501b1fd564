package daemon

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"

	"golang.org/x/sync/errgroup"

	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/cdimode"
	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/doctor"
	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/guard"
	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/inventory"
	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/ledger"
	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/metrics"
	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/plugin"
	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/verify"
	"github.com/hyperaccel/lpu-node/config"
	"github.com/hyperaccel/lpu-node/internal/dracheckpoint"
	"github.com/hyperaccel/lpu-node/internal/metricsserver"
	"github.com/hyperaccel/lpu-node/internal/node"
	"github.com/hyperaccel/lpu-node/internal/podresources"
	"github.com/hyperaccel/lpu-node/internal/startup"
	"github.com/hyperaccel/lpu-node/pkg/inject"
	"github.com/hyperaccel/lpu-node/pkg/ready"
)

// Params are what Run needs besides the context.
type Params struct {
	Config *config.Config
	Mode   string // config.InjectionNRI or config.InjectionCDI (resolved)
	// ModeReason says how Mode was chosen (doctor prints it).
	ModeReason string
	Logger     *slog.Logger
	Version    string
	// OtherFingerprints are other nodes' seal key fingerprints (doctor).
	OtherFingerprints []string
}

func (p Params) log() *slog.Logger { return startup.Logger(p.Logger) }

// open opens the node (node.Open) the way every lpu-nri command does.
func (p Params) open() (*node.Node, error) {
	return node.Open(p.Config, node.Options{Logger: p.log()})
}

// metrics returns fresh metrics with the build info set: the one place
// lpu-nri's collectors are built.
func (p Params) metrics() *metrics.Metrics {
	m := metrics.New()
	m.Build.WithLabelValues("lpu-nri", p.Version, runtime.Version()).Set(1)
	return m
}

// Run runs the daemon in p.Mode until ctx is done.
func Run(ctx context.Context, p Params) error {
	log, cfg := p.log(), p.Config
	n, err := p.open()
	if err != nil {
		return err
	}
	m := p.metrics()
	log.Info("starting lpu-nri", "version", p.Version, "mode", p.Mode, "root", n.Root,
		"stateDir", cfg.StateDir)

	g, ctx := errgroup.WithContext(ctx)
	switch p.Mode {
	case config.InjectionCDI:
		s := &cdimode.Syncer{Discoverer: n.Discoverer, Dir: cfg.CDI.SpecDir, Options: n.Inject,
			Interval: cfg.Health.ResyncInterval.Duration, Metrics: m, Log: log}
		g.Go(func() error { return s.Run(ctx) })
		g.Go(func() error {
			return metricsserver.Serve(ctx, cfg.Metrics.Address, metricsserver.Handler(m.Registry, nil, s.Ready), log)
		})
	case config.InjectionNRI:
		if err := installGuard(p); err != nil {
			return err
		}
		stop, err := startNRI(ctx, g, p, n, m)
		if err != nil {
			return err
		}
		defer stop()
	default:
		return fmt.Errorf("mode %q: want %s or %s", p.Mode, config.InjectionNRI, config.InjectionCDI)
	}
	err = g.Wait()
	log.Info("lpu-nri stopped")
	return err
}

// installGuard, with security.runtimeGuard on, installs the guard hook's
// binary under the state directory and writes the guard's CDI spec, which
// the device plugin's allocations name: without it the runtime cannot
// resolve that device and fails every LPU container, so an error stops
// the daemon here, where it is seen.
func installGuard(p Params) error {
	cfg := p.Config
	if !cfg.Security.RuntimeGuard {
		return nil
	}
	hook, err := guard.Install(cfg.StateDir)
	if err != nil {
		return fmt.Errorf("security.runtimeGuard: %w", err)
	}
	changed, err := guard.WriteSpec(cfg.CDI.SpecDir, hook, cfg.StateDir)
	if err != nil {
		return fmt.Errorf("security.runtimeGuard: %w", err)
	}
	p.log().Info("runtime guard installed", "hook", hook, "spec", filepath.Join(cfg.CDI.SpecDir, guard.SpecFileName),
		"device", inject.GuardDevice, "specChanged", changed)
	return nil
}

// cleanups runs what a start-up acquired, last first.
type cleanups []func()

func (c *cleanups) add(f func()) { *c = append(*c, f) }

func (c cleanups) run() {
	for i := len(c) - 1; i >= 0; i-- {
		c[i]()
	}
}

// startNRI starts NRI mode's parts in g: the inventory refresh, the NRI
// plugin's reconnect loop, the audit and the metrics endpoint. stop
// releases the readiness socket, tracing and the PodResources client once
// g is done; on an error they are released before startNRI returns.
func startNRI(ctx context.Context, g *errgroup.Group, p Params, n *node.Node, m *metrics.Metrics) (stop func(), err error) {
	cfg, log := p.Config, p.log()
	var done cleanups
	defer func() {
		if err != nil {
			done.run()
		}
	}()
	pc, err := pluginConfig(ctx, p, n, m, &done)
	if err != nil {
		return nil, err
	}
	pl, err := plugin.New(pc)
	if err != nil {
		return nil, err
	}
	r := &plugin.Runner{Plugin: pl, Name: cfg.NRI.PluginName, Index: cfg.NRI.PluginIndex,
		Socket: cfg.NRI.Socket, Log: log}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	g.Go(func() error { return pc.Store.Run(ctx) })
	g.Go(func() error { return r.Run(ctx) })
	g.Go(func() error { return pl.RunAudit(ctx, cfg.Security.AuditInterval.Duration) })
	g.Go(func() error {
		return metricsserver.Serve(ctx, cfg.Metrics.Address, metricsserver.Handler(m.Registry, nil, pl.Live), log)
	})
	return done.run, nil
}

// pluginConfig gathers the NRI plugin's parts: the seal key bound to the
// node, the replay ledger, the inventory (refreshed once), the readiness
// socket, tracing and, when configured, the PodResources cross-check.
// What must be released is added to done.
func pluginConfig(ctx context.Context, p Params, n *node.Node, m *metrics.Metrics, done *cleanups) (plugin.Config, error) {
	cfg, log := p.Config, p.log()
	name, _ := n.Name()
	key, err := n.SealKey()
	if err != nil {
		return plugin.Config{}, err
	}
	var ledgerOpts []ledger.Option
	if cfg.Kubelet.PodResourcesCheck { // refuses a replayed ID on its own: idle IDs may go
		ledgerOpts = append(ledgerOpts, ledger.EvictIdle())
	}
	led, err := ledger.Open(cfg.StateDir, ledgerOpts...)
	if err != nil {
		return plugin.Config{}, err
	}
	done.add(func() { led.Close() }) // syncs what the background flush has not yet
	m.WatchLedger(led.Namespaces)
	log.Info("seal key loaded", "path", key.Path(), "node", name, "fingerprint", key.Fingerprint(),
		"ledger", led.Path())
	store := inventory.New(n.Discoverer, inventory.Options{Interval: cfg.Health.ResyncInterval.Duration, Logger: log})
	if _, err := store.Refresh(ctx); err != nil {
		log.Warn("initial device discovery failed; retrying in the background", "err", err)
	}
	rs, err := ready.Listen(ready.Path(cfg.StateDir))
	if err != nil {
		return plugin.Config{}, fmt.Errorf("readiness socket: %w", err)
	}
	done.add(func() { rs.Close() })
	// Tracing fails open: a bad endpoint or exporter is logged, never fatal.
	tracer, stopTracing := startup.Tracing(ctx, cfg.Tracing, "lpu-nri", p.Version, log)
	done.add(stopTracing)
	pc := plugin.Config{Config: verify.Config{Key: key, Store: store, Options: n.Inject, Log: log,
		CheckTimeout:    cfg.Kubelet.PodResourcesTimeout.Duration,
		Ledger:          led,
		AllowNamespaces: cfg.Security.AllowNamespaces,
		Claims: func(pod string, claims []string) ([]string, error) {
			return dracheckpoint.PodLPUs(cfg.StateDir, pod, claims)
		}}, Metrics: m, Ready: rs, Tracer: tracer, RuntimeGuard: cfg.Security.RuntimeGuard}
	if cfg.Kubelet.PodResourcesCheck {
		c := podresources.New(cfg.Kubelet.PodResourcesSocket, cfg.ResourceName)
		done.add(func() { c.Close() })
		pc.Check = c
	}
	return pc, nil
}

// CDIGenerate writes the spec once into cfg.CDI.SpecDir and prints what it
// did to w.
func CDIGenerate(ctx context.Context, p Params, w io.Writer) error {
	n, err := p.open()
	if err != nil {
		return err
	}
	s := &cdimode.Syncer{Discoverer: n.Discoverer, Dir: p.Config.CDI.SpecDir, Options: n.Inject, Log: p.log()}
	changed, err := s.Sync(ctx)
	if err != nil {
		return err
	}
	verb := "unchanged"
	if changed {
		verb = "wrote"
	}
	_, err = fmt.Fprintf(w, "%s %s/%s\n", verb, p.Config.CDI.SpecDir, inject.SpecFileName)
	return err
}

// CDIList prints the fully qualified CDI device names of the node, one a
// line.
func CDIList(ctx context.Context, p Params, w io.Writer) error {
	n, err := p.open()
	if err != nil {
		return err
	}
	spec, err := cdimode.Render(ctx, n.Discoverer, n.Inject)
	if err != nil {
		return err
	}
	for _, name := range cdimode.Names(spec) {
		if _, err := fmt.Fprintln(w, name); err != nil {
			return err
		}
	}
	return nil
}

// DevicePluginHealthEnv names the device plugin's /healthz URL for doctor,
// asked when the kubelet dir is not visible; the Helm chart sets it in the
// lpu-nri container (the pod's loopback reaches the device plugin).
const DevicePluginHealthEnv = "LPU_DEVICE_PLUGIN_HEALTH_URL"

// Doctor runs the checks, prints them to w and reports whether any failed.
func Doctor(ctx context.Context, p Params, pluginDir string, w io.Writer) (failed bool, err error) {
	n, err := p.open()
	if err != nil {
		return true, err
	}
	cfg := p.Config
	results := doctor.Run(ctx, doctor.Params{
		Root: n.Root, Discovery: n.DiscoveryOptions(), StateDir: cfg.StateDir, Mode: p.Mode, NRISocket: cfg.NRI.Socket,
		PluginName: cfg.NRI.PluginName, PluginIndex: cfg.NRI.PluginIndex, PluginDir: pluginDir,
		CDIDir: cfg.CDI.SpecDir, KubeletDir: cfg.Kubelet.DevicePluginDir, ResourceName: cfg.ResourceName,
		DevicePluginHealth: os.Getenv(DevicePluginHealthEnv),
		OtherFingerprints:  p.OtherFingerprints,
	})
	results = append([]doctor.Result{{Check: "mode", OK: true, Detail: p.ModeReason}}, results...)
	return doctor.Print(w, results), nil
}

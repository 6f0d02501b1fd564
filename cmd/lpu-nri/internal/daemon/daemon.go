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
	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/inventory"
	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/ledger"
	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/metrics"
	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/plugin"
	"github.com/hyperaccel/lpu-node/config"
	"github.com/hyperaccel/lpu-node/internal/backoff"
	"github.com/hyperaccel/lpu-node/internal/dracheckpoint"
	"github.com/hyperaccel/lpu-node/internal/podresources"
	"github.com/hyperaccel/lpu-node/internal/startup"
	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/inject"
	"github.com/hyperaccel/lpu-node/pkg/ready"
)

// Params are what Run needs besides the context.
type Params struct {
	Config *config.Config
	Mode   string // config.InjectionNRI or config.InjectionCDI (resolved)
	// ModeReason says how Mode was chosen (doctor prints it).
	ModeReason string
	Simulate   int // > 0: simulated node of this many LPUs
	Logger     *slog.Logger
	Version    string
	// Metrics, when set, is used instead of a fresh metrics.New() (tests).
	Metrics *metrics.Metrics
	// Backoff bounds the NRI reconnect waits; zero fields take
	// backoff.Default.
	Backoff backoff.Steps
	// onSync is called after each rescan in CDI mode (tests).
	onSync func()
	// OtherFingerprints are other nodes' seal key fingerprints (doctor).
	OtherFingerprints []string
	// Getenv reads NODE_NAME (the node the seals are bound to); nil means
	// os.Getenv.
	Getenv func(string) string
}

func (p Params) log() *slog.Logger { return startup.Logger(p.Logger) }

// DiscoveryRoot prepares the simulated node when asked and returns the root
// to discover under.
func DiscoveryRoot(cfg *config.Config, simulate int) (string, error) {
	if simulate <= 0 {
		return cfg.Root, nil
	}
	return device.SimulateBackendNode(cfg.StateDir, simulate, cfg.Simulate.Backend)
}

// Discoverer returns the discoverer for cfg under root: the configured
// backend, or simulate.backend when root is the simulated node.
func Discoverer(cfg *config.Config, root string, log *slog.Logger) *device.Sysfs {
	simulated := root == device.SimulatedRoot(cfg.StateDir)
	return device.NewSysfs(root, append(cfg.DiscoveryOptions(simulated), device.WithLogger(log))...)
}

// InjectOptions returns the mounts and env for LPU containers. Mounts whose
// host path does not exist (under cfg.Root, where this process sees the
// host) are dropped with a warning: the runtime would fail every LPU
// container on them. With a simulated node (simRoot != "") a mount whose
// host path exists inside the simulated tree is taken from there, so the
// simulated driver library and tool reach the container; such a mount was
// found where this process sees the state dir (the same path as on the
// host), so it is not looked for again under cfg.Root.
func InjectOptions(cfg *config.Config, simRoot string, log *slog.Logger) inject.Options {
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

// simRoot returns the simulated tree's root, or "" without --simulate.
func simRoot(cfg *config.Config, simulate int) string {
	if simulate <= 0 {
		return ""
	}
	return device.SimulatedRoot(cfg.StateDir)
}

// Run runs the daemon in p.Mode until ctx is done.
func Run(ctx context.Context, p Params) error {
	log := p.log()
	cfg := p.Config
	root, err := DiscoveryRoot(cfg, p.Simulate)
	if err != nil {
		return err
	}
	m := p.Metrics
	if m == nil {
		m = metrics.New()
	}
	m.Build.WithLabelValues("lpu-nri", p.Version, runtime.Version()).Set(1)
	disc := Discoverer(cfg, root, log)
	opts := InjectOptions(cfg, simRoot(cfg, p.Simulate), log)
	log.Info("starting lpu-nri", "version", p.Version, "mode", p.Mode, "root", root,
		"stateDir", cfg.StateDir, "simulate", p.Simulate)

	g, ctx := errgroup.WithContext(ctx)
	switch p.Mode {
	case config.InjectionCDI:
		s := &cdimode.Syncer{Discoverer: disc, Dir: cfg.CDI.SpecDir, Options: opts,
			Interval: cfg.Health.ResyncInterval.Duration, Metrics: m, Log: log, OnSync: p.onSync}
		g.Go(func() error { return s.Run(ctx) })
		g.Go(func() error { return m.Serve(ctx, cfg.Metrics.Address, s.Synced, log) })
	case config.InjectionNRI:
		getenv := p.Getenv
		if getenv == nil {
			getenv = os.Getenv
		}
		node, err := inject.NodeName(getenv)
		if err != nil {
			return err
		}
		key, err := inject.LoadOrCreateKey(cfg.StateDir)
		if err != nil {
			return err
		}
		if key, err = key.ForNode(node); err != nil {
			return err
		}
		led, err := ledger.Open(cfg.StateDir)
		if err != nil {
			return err
		}
		log.Info("seal key loaded", "path", key.Path(), "node", node, "fingerprint", key.Fingerprint(),
			"acceptLegacySeals", cfg.Security.AcceptLegacySeals, "ledger", led.Path())
		store := inventory.New(disc, inventory.Options{Interval: cfg.Health.ResyncInterval.Duration, Logger: log})
		if _, err := store.Refresh(ctx); err != nil {
			log.Warn("initial device discovery failed; retrying in the background", "err", err)
		}
		rs, err := ready.Listen(ready.Path(cfg.StateDir))
		if err != nil {
			return fmt.Errorf("readiness socket: %w", err)
		}
		defer rs.Close()
		// Tracing fails open: a bad endpoint or exporter is logged, never fatal.
		tracer, stopTracing := startup.Tracing(ctx, cfg.Tracing, "lpu-nri", p.Version, log)
		defer stopTracing()
		pc := plugin.Config{Key: key, Store: store, Options: opts, Metrics: m, Ready: rs, Log: log,
			CheckTimeout: cfg.Kubelet.PodResourcesTimeout.Duration, Tracer: tracer,
			Ledger: led, AcceptLegacySeals: cfg.Security.AcceptLegacySeals,
			AllowNamespaces: cfg.Security.AllowNamespaces,
			Claims: func(pod string, claims []string) ([]string, error) {
				return dracheckpoint.PodLPUs(cfg.StateDir, pod, claims)
			}}
		if cfg.Kubelet.PodResourcesCheck {
			c := podresources.New(cfg.Kubelet.PodResourcesSocket, cfg.ResourceName)
			defer c.Close()
			pc.Check = c
		}
		pl, err := plugin.New(pc)
		if err != nil {
			return err
		}
		r := &plugin.Runner{Plugin: pl, Name: cfg.NRI.PluginName, Index: cfg.NRI.PluginIndex,
			Socket: cfg.NRI.Socket, Log: log, Backoff: p.Backoff}
		if err := r.Validate(); err != nil {
			return err
		}
		g.Go(func() error { return store.Run(ctx) })
		g.Go(func() error { return r.Run(ctx) })
		g.Go(func() error { return pl.RunAudit(ctx, cfg.Security.AuditInterval.Duration) })
		g.Go(func() error { return m.Serve(ctx, cfg.Metrics.Address, pl.Connected, log) })
	default:
		return fmt.Errorf("mode %q: want %s or %s", p.Mode, config.InjectionNRI, config.InjectionCDI)
	}
	err = g.Wait()
	log.Info("lpu-nri stopped")
	return err
}

// CDIGenerate writes the spec once into cfg.CDI.SpecDir and prints what it
// did to w.
func CDIGenerate(ctx context.Context, p Params, w io.Writer) error {
	root, err := DiscoveryRoot(p.Config, p.Simulate)
	if err != nil {
		return err
	}
	s := &cdimode.Syncer{Discoverer: Discoverer(p.Config, root, p.log()), Dir: p.Config.CDI.SpecDir,
		Options: InjectOptions(p.Config, simRoot(p.Config, p.Simulate), p.log()), Log: p.log()}
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
	root, err := DiscoveryRoot(p.Config, p.Simulate)
	if err != nil {
		return err
	}
	spec, err := cdimode.Render(ctx, Discoverer(p.Config, root, p.log()), InjectOptions(p.Config, simRoot(p.Config, p.Simulate), p.log()))
	if err != nil {
		return err
	}
	for _, n := range cdimode.Names(spec) {
		if _, err := fmt.Fprintln(w, n); err != nil {
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
	root, err := DiscoveryRoot(p.Config, p.Simulate)
	if err != nil {
		return true, err
	}
	cfg := p.Config
	results := doctor.Run(ctx, doctor.Params{
		Root: root, Discovery: cfg.DiscoveryOptions(p.Simulate > 0), StateDir: cfg.StateDir, Mode: p.Mode, NRISocket: cfg.NRI.Socket,
		PluginName: cfg.NRI.PluginName, PluginIndex: cfg.NRI.PluginIndex, PluginDir: pluginDir,
		CDIDir: cfg.CDI.SpecDir, KubeletDir: cfg.Kubelet.DevicePluginDir, ResourceName: cfg.ResourceName,
		DevicePluginHealth: os.Getenv(DevicePluginHealthEnv),
		OtherFingerprints:  p.OtherFingerprints,
	})
	results = append([]doctor.Result{{Check: "mode", OK: true, Detail: p.ModeReason}}, results...)
	return doctor.Print(w, results), nil
}

// Package daemon builds lpu-dra's parts on the node (internal/node) and
// runs them: the health monitor, the DRA driver behind the kubelet plugin
// helper, the slice publisher, the metrics endpoint (with the node-level
// device series of internal/devicemetrics) and the NFD feature file.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/hyperaccel/lpu-node/cmd/lpu-dra/internal/driver"
	"github.com/hyperaccel/lpu-node/cmd/lpu-dra/internal/reservations"
	"github.com/hyperaccel/lpu-node/cmd/lpu-dra/internal/statuswriter"
	"github.com/hyperaccel/lpu-node/config"
	"github.com/hyperaccel/lpu-node/internal/devicemetrics"
	"github.com/hyperaccel/lpu-node/internal/health"
	"github.com/hyperaccel/lpu-node/internal/metricsserver"
	"github.com/hyperaccel/lpu-node/internal/nfd"
	"github.com/hyperaccel/lpu-node/internal/node"
	"github.com/hyperaccel/lpu-node/internal/podresources"
	"github.com/hyperaccel/lpu-node/internal/startup"
	"github.com/hyperaccel/lpu-node/pkg/cordon"
	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/inject"
	"github.com/hyperaccel/lpu-node/pkg/nodelabel"
)

// Params is everything Run needs.
type Params struct {
	Config  *config.Config // after flags were applied
	Options *Options
	Logger  *slog.Logger
	Version string
}

// Run serves until ctx ends. It fails at start when the device plugin
// serves the node, the API server is older than 1.36 (checkAPIServer), a
// named kubelet root does not exist, the checkpoint is
// corrupt, the kube client cannot be built, the kubelet plugin cannot start
// or the node's rings cannot be published; an API server that is down is
// retried by the helper while prepared claims keep being served.
func Run(ctx context.Context, p Params) error {
	cfg, opts, log := p.Config, p.Options, startup.Logger(p.Logger)
	if err := node.RefuseIfDevicePlugin(filepath.Join(cfg.Kubelet.DevicePluginDir, device.PluginSocketName(cfg.ResourceName))); err != nil {
		return err
	}
	n, err := node.Open(cfg, node.Options{Name: opts.NodeName, Kubelet: true, Logger: log})
	if err != nil {
		return err
	}
	client, err := kubeClient(opts.Kubeconfig)
	if err != nil {
		return err
	}
	k := &kubelet{client: client, node: opts.NodeName, podUID: opts.PodUID, published: make(chan struct{})}
	k.pluginDir, k.registryDir = opts.KubeletDirs(cfg)
	log.Info("starting lpu-dra", "version", p.Version, "node", opts.NodeName, "root", n.Root, "stateDir", cfg.StateDir,
		"cdiDir", cfg.CDI.SpecDir, "pluginDir", k.pluginDir, "registryDir", k.registryDir, "podUID", opts.PodUID)

	tracer, stopTracing := startup.Tracing(ctx, cfg.Tracing, "lpu-dra", p.Version, log)
	defer stopTracing()

	mon := health.New(n.Discoverer, n.HealthOptions())
	metrics := driver.NewMetrics(opts.NodeName)
	dopts := driverOptions(n, opts.NodeName, metrics, tracer, log)
	dopts.Holder = opts.PodUID
	// LPUs device-plugin pods still hold (the node moved to DRA without a
	// drain) are kept out of the pool (driver.WatchDevicePlugin).
	pr := podresources.New(cfg.Kubelet.PodResourcesSocket, cfg.ResourceName)
	defer pr.Close()
	dopts.DevicePlugin = pr
	var labels *nodelabel.Keeper
	// The chart always grants lpu-dra get, list and watch on Nodes: the
	// cordoned-LPU annotation of its own is followed in every config.
	cordons := cordon.NewWatcher(cordon.Options{Client: client, Node: opts.NodeName, Logger: log})
	dopts.Cordoned = cordons
	if cfg.DRA.LabelsNode() {
		labels = nodelabel.New(nodelabel.Options{Client: client, Node: opts.NodeName, Logger: log})
		dopts.NodeLabels = labels
		metrics.WatchNodeLabels(labels)
	} else {
		metrics.WatchNodeLabels(nil)
	}
	drv, err := driver.New(mon, dopts)
	if err != nil {
		return err
	}

	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return checkAPIServer(ctx, client.Discovery(), log) }) // below 1.36 it ends the run
	g.Go(func() error { return mon.Run(ctx) })
	g.Go(func() error { return drv.WatchDevicePlugin(ctx) })
	if labels != nil {
		g.Go(func() error { return labels.Run(ctx) })
	}
	g.Go(func() error { return cordons.Run(ctx) })
	startStatus(ctx, g, k, log)
	g.Go(func() error { return k.run(ctx, mon, drv) })
	g.Go(func() error {
		return reservations.Run(ctx, drv, reservations.Options{Client: client, NodeName: opts.NodeName, Logger: log})
	})
	reportNode(ctx, g, n, opts, p.Version, mon, drv, metrics, log)
	if addr := cfg.Metrics.Address; addr != "" {
		g.Go(func() error {
			return metricsserver.Serve(ctx, addr, metricsserver.Handler(metrics.Registry, k.healthz, k.readyz), log)
		})
	}
	err = g.Wait()
	log.Info("lpu-dra stopped", "err", err)
	return err
}

// driverOptions are the driver's options on node n: the per-claim CDI
// specs inject n's mounts (node.Node.Inject).
func driverOptions(n *node.Node, name string, m *driver.Metrics, tracer trace.Tracer, log *slog.Logger) driver.Options {
	cfg := n.Config
	return driver.Options{
		NodeName: name, StateDir: cfg.StateDir, CDIDir: cfg.CDI.SpecDir, Inject: n.Inject,
		PCIeRoot: pcieRoot(n.Root), ArcSizes: cfg.DRA.ArcSizes, DeviceClasses: cfg.DRA.Classes(), Metrics: m, Tracer: tracer, Logger: log,
	}
}

// kubelet is the driver's side of the kubelet: the plugin helper, started
// once the first discovery ran, and the health checks that read it.
type kubelet struct {
	client                 kubernetes.Interface
	node                   string
	podUID                 string // "": no rolling update
	pluginDir, registryDir string

	helper    *kubeletplugin.Helper // set before published is closed
	published chan struct{}         // closed once the helper started
	status    *statuswriter.Writer  // claim status.devices; nil: not written
}

// run waits for the first discovery, starts the kubelet plugin helper and
// publishes the node's arcs until ctx ends.
func (k *kubelet) run(ctx context.Context, mon *health.Monitor, drv *driver.Driver) error {
	select {
	case <-mon.Ready():
	case <-ctx.Done():
		return nil
	}
	drv.Heal()
	drv.ReportPrepared(k.status)
	if _, err := drv.Resources(); err != nil {
		return err // a node whose rings cannot be published
	}
	for _, dir := range []string{k.pluginDir, k.registryDir} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return fmt.Errorf("create kubelet plugin dir %s: %w", dir, err)
		}
	}
	h, err := kubeletplugin.Start(ctx, drv.WithStatus(k.status), k.options()...)
	if err != nil {
		return fmt.Errorf("start kubelet plugin: %w", err)
	}
	k.helper = h
	defer h.Stop()
	close(k.published)
	return drv.RunPublisher(ctx, h)
}

// options are the kubelet plugin helper's. With a pod UID the helper runs
// in rolling-update mode: registration and DRA sockets named per pod, so
// the kubelet talks to the old and the new pod of a surge at once, and its
// calls serialized across both by a lock file in the plugin dir (the
// driver's own checkpoint lock covers the rest).
func (k *kubelet) options() []kubeletplugin.Option {
	opts := []kubeletplugin.Option{
		kubeletplugin.DriverName(inject.Driver),
		kubeletplugin.KubeClient(k.client),
		kubeletplugin.NodeName(k.node),
		kubeletplugin.RegistrarDirectoryPath(k.registryDir),
		kubeletplugin.PluginDataDirectoryPath(k.pluginDir),
	}
	if k.podUID != "" {
		opts = append(opts, kubeletplugin.RollingUpdate(types.UID(k.podUID)))
	}
	return opts
}

// healthz passes while the driver is registered with the kubelet.
func (k *kubelet) healthz() error {
	select {
	case <-k.published:
	default:
		return errors.New("kubelet plugin not started")
	}
	if s := k.helper.RegistrationStatus(); s == nil || !s.PluginRegistered {
		return errors.New("not registered with the kubelet")
	}
	return nil
}

// readyz passes once devices were discovered and the kubelet plugin
// started; in rolling-update mode also only once the kubelet registered
// this pod: the DaemonSet stops the old pod when the new one is ready, and
// the kubelet must be able to call the new one by then.
func (k *kubelet) readyz() error {
	select {
	case <-k.published:
	default:
		return errors.New("devices not discovered or slices not published yet")
	}
	if k.podUID == "" {
		return nil
	}
	if s := k.helper.RegistrationStatus(); s == nil || !s.PluginRegistered {
		return errors.New("not registered with the kubelet yet")
	}
	return nil
}

// reportNode gives a DRA node the node-level reporting of a device-plugin
// node: the device series on lpu-dra's registry, telemetry labelled with
// the pods of the prepared claims (driver.Holders), and the NFD feature
// file.
func reportNode(ctx context.Context, g *errgroup.Group, n *node.Node, opts *Options, version string, mon *health.Monitor, drv *driver.Driver, m *driver.Metrics, log *slog.Logger) {
	m.Registry.MustRegister(devicemetrics.New(devicemetrics.Options{Node: opts.NodeName, Daemon: "lpu-dra", Version: version,
		Devices: mon, Telemetry: n.Discoverer, Holders: drv, Logger: log}))
	if path := opts.NFD.Path(n.Root, log); path != "" {
		g.Go(func() error { return nfd.Keep(ctx, mon, path, n.Config.ResourceName, log) })
	}
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

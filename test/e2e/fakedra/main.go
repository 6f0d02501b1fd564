// Command fakedra is a second, fake DRA driver for the end-to-end tests: a
// kubelet plugin of another vendor's name that publishes a few devices for
// its node and prepares any claim of them with no CDI device, so a pod of
// that driver's claim starts with nothing added. The e2e runs it beside
// lpu-dra to show that the chart's runtime gate leaves such a pod alone
// while lpu-nri is down (issue 33, defect 2). Only the e2e uses it.
//
//	fakedra --driver gpu.example.com --node NODE --kubeconfig K \
//	  --plugin-dir /var/lib/kubelet/plugins/gpu.example.com --registry-dir /var/lib/kubelet/plugins_registry
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "fakedra:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("fakedra", flag.ContinueOnError)
	driver := fs.String("driver", "gpu.example.com", "driver `NAME` (not lpu.hyperaccel.ai)")
	node := fs.String("node", "", "the node's `NAME`")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig `FILE`")
	pluginDir := fs.String("plugin-dir", "", "the kubelet plugin's `DIR` for its DRA socket")
	registryDir := fs.String("registry-dir", "", "the kubelet's plugin registry `DIR`")
	devices := fs.Int("devices", 2, "how many devices to publish")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *node == "" || *kubeconfig == "" || *pluginDir == "" || *registryDir == "" {
		return errors.New("--node, --kubeconfig, --plugin-dir and --registry-dir are required")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig %s: %w", *kubeconfig, err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	for _, dir := range []string{*pluginDir, *registryDir} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return fmt.Errorf("create %s: %w", dir, err)
		}
	}
	d := &fake{pool: *node, log: slog.New(slog.NewJSONHandler(os.Stderr, nil))}
	h, err := kubeletplugin.Start(ctx, d, kubeletplugin.DriverName(*driver), kubeletplugin.KubeClient(client),
		kubeletplugin.NodeName(*node), kubeletplugin.RegistrarDirectoryPath(*registryDir),
		kubeletplugin.PluginDataDirectoryPath(*pluginDir))
	if err != nil {
		return fmt.Errorf("start kubelet plugin: %w", err)
	}
	defer h.Stop()
	devs := make([]resourceapi.Device, *devices)
	for i := range devs {
		devs[i] = resourceapi.Device{Name: fmt.Sprintf("dev%d", i)}
	}
	res := resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{*node: {Slices: []resourceslice.Slice{{Devices: devs}}}}}
	if err := h.PublishResources(ctx, res); err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	d.log.Info("serving", "driver", *driver, "node", *node, "devices", *devices)
	<-ctx.Done()
	return nil
}

// fake prepares every claim of its devices with nothing for the runtime to
// add.
type fake struct {
	pool string
	log  *slog.Logger
}

// PrepareResourceClaims answers each claim with its allocated devices of
// this driver, no CDI device.
func (f *fake) PrepareResourceClaims(_ context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, c := range claims {
		var r kubeletplugin.PrepareResult
		if c.Status.Allocation != nil {
			for _, d := range c.Status.Allocation.Devices.Results {
				r.Devices = append(r.Devices, kubeletplugin.Device{Requests: []string{d.Request}, PoolName: d.Pool, DeviceName: d.Device})
			}
		}
		f.log.Info("prepared", "claim", c.Namespace+"/"+c.Name, "uid", c.UID, "devices", len(r.Devices))
		out[c.UID] = r
	}
	return out, nil
}

// UnprepareResourceClaims has nothing to undo.
func (f *fake) UnprepareResourceClaims(_ context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := make(map[types.UID]error, len(claims))
	for _, c := range claims {
		out[c.UID] = nil
	}
	return out, nil
}

// HandleError logs what the helper hits in the background.
func (f *fake) HandleError(_ context.Context, err error, msg string) {
	f.log.Error(msg, "err", err)
}

// WatchHealthStatus reports nothing: the fake devices never fail.
func (f *fake) WatchHealthStatus(ctx context.Context, _ chan<- kubeletplugin.DeviceHealthReport) error {
	<-ctx.Done()
	return nil
}

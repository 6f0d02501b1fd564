package prom

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	podresources "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// kubelet stands in for the kubelet's two gRPC services the device plugin
// talks to (the real API types): Registration on <root>/device-plugins/
// kubelet.sock and PodResources on <root>/pod-resources/kubelet.sock. The
// test allocates through the plugin's own socket and records the holders
// it then lists, as the kubelet would after admitting a pod.
type kubelet struct {
	pluginapi.UnimplementedRegistrationServer
	podresources.UnimplementedPodResourcesListerServer

	root    string
	servers []*grpc.Server
	mu      sync.Mutex
	pods    []*podresources.PodResources
	reg     chan *pluginapi.RegisterRequest
}

// startKubelet serves both sockets under root until the test ends.
func startKubelet(t *testing.T, root string) *kubelet {
	t.Helper()
	k := &kubelet{root: root, reg: make(chan *pluginapi.RegisterRequest, 4)}
	for _, sock := range []string{k.registrationSocket(), filepath.Join(root, "pod-resources", "kubelet.sock")} {
		if err := os.MkdirAll(filepath.Dir(sock), 0o755); err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		s := grpc.NewServer()
		if filepath.Base(filepath.Dir(sock)) == "device-plugins" {
			pluginapi.RegisterRegistrationServer(s, k)
		} else {
			podresources.RegisterPodResourcesListerServer(s, k)
		}
		k.servers = append(k.servers, s)
		go func() { _ = s.Serve(ln) }()
	}
	t.Cleanup(func() {
		for _, s := range k.servers {
			s.Stop()
		}
	})
	return k
}

func (k *kubelet) registrationSocket() string {
	return filepath.Join(k.root, "device-plugins", "kubelet.sock")
}

// Register records the plugin's registration.
func (k *kubelet) Register(_ context.Context, r *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	k.reg <- r
	return &pluginapi.Empty{}, nil
}

// List returns the holders recorded with hold.
func (k *kubelet) List(context.Context, *podresources.ListPodResourcesRequest) (*podresources.ListPodResourcesResponse, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return &podresources.ListPodResourcesResponse{PodResources: k.pods}, nil
}

// hold records that container of namespace/pod holds ids.
func (k *kubelet) hold(namespace, pod, container string, ids []string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.pods = append(k.pods, &podresources.PodResources{Namespace: namespace, Name: pod, Containers: []*podresources.ContainerResources{{
		Name: container, Devices: []*podresources.ContainerDevices{{ResourceName: "hyperaccel.ai/lpu", DeviceIds: ids}},
	}}})
}

// plugin waits for the device plugin's registration and dials its socket,
// opening the ListAndWatch stream the kubelet keeps.
func (k *kubelet) plugin(t *testing.T) pluginapi.DevicePluginClient {
	t.Helper()
	var r *pluginapi.RegisterRequest
	select {
	case r = <-k.reg:
	case <-time.After(15 * time.Second):
		t.Fatal("the device plugin did not register in 15s")
	}
	conn, err := grpc.NewClient("unix://"+filepath.Join(k.root, "device-plugins", r.Endpoint),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c := pluginapi.NewDevicePluginClient(conn)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := c.ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			if _, err := stream.Recv(); err != nil {
				return
			}
		}
	}()
	return c
}

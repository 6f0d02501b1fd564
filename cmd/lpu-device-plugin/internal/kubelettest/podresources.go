package kubelettest

import (
	"context"
	"net"
	"os"
	"sync"
	"testing"

	"google.golang.org/grpc"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// PodResources is the kubelet's PodResources service (v1) on a unix socket,
// answering List with the pods set by SetPods.
type PodResources struct {
	podresourcesapi.UnimplementedPodResourcesListerServer

	// Socket is the socket path it serves on.
	Socket string

	mu    sync.Mutex
	pods  []*podresourcesapi.PodResources
	calls int
}

// StartPodResources serves PodResources on socket until the test ends.
func StartPodResources(t testing.TB, socket string) *PodResources {
	t.Helper()
	_ = os.Remove(socket)
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatalf("listen %s: %v", socket, err)
	}
	p := &PodResources{Socket: socket}
	srv := grpc.NewServer()
	podresourcesapi.RegisterPodResourcesListerServer(srv, p)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	return p
}

// Holding is one container holding devices of a resource.
type Holding struct {
	Namespace, Pod, Container string
	Resource                  string
	DeviceIDs                 []string
}

// SetPods replaces what List answers.
func (p *PodResources) SetPods(holdings ...Holding) {
	var pods []*podresourcesapi.PodResources
	for _, h := range holdings {
		pods = append(pods, &podresourcesapi.PodResources{
			Name:      h.Pod,
			Namespace: h.Namespace,
			Containers: []*podresourcesapi.ContainerResources{{
				Name:    h.Container,
				Devices: []*podresourcesapi.ContainerDevices{{ResourceName: h.Resource, DeviceIds: h.DeviceIDs}},
			}},
		})
	}
	p.mu.Lock()
	p.pods = pods
	p.mu.Unlock()
}

// Calls returns how many List calls were served.
func (p *PodResources) Calls() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls
}

// List answers with the pods set by SetPods.
func (p *PodResources) List(context.Context, *podresourcesapi.ListPodResourcesRequest) (*podresourcesapi.ListPodResourcesResponse, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	return &podresourcesapi.ListPodResourcesResponse{PodResources: p.pods}, nil
}

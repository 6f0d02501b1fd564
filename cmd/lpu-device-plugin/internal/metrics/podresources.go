package metrics

import (
	"context"
	"fmt"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// PodResources asks the kubelet's PodResources service (v1 List) which
// container holds each device of one resource.
type PodResources struct {
	socket   string
	resource string

	mu   sync.Mutex
	conn *grpc.ClientConn
}

var _ HolderLister = (*PodResources)(nil)

// NewPodResources returns a lister for resource on the kubelet's
// pod-resources socket. It connects lazily; Close releases the connection.
func NewPodResources(socket, resource string) *PodResources {
	return &PodResources{socket: socket, resource: resource}
}

func (p *PodResources) client() (podresourcesapi.PodResourcesListerClient, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn == nil {
		conn, err := grpc.NewClient("unix://"+p.socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, fmt.Errorf("dial pod resources %s: %w", p.socket, err)
		}
		p.conn = conn
	}
	return podresourcesapi.NewPodResourcesListerClient(p.conn), nil
}

// Holders lists the pods and maps each device ID of the resource to the
// container holding it. ctx bounds the call.
func (p *PodResources) Holders(ctx context.Context) (map[string]Holder, error) {
	c, err := p.client()
	if err != nil {
		return nil, err
	}
	resp, err := c.List(ctx, &podresourcesapi.ListPodResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("list pod resources on %s: %w", p.socket, err)
	}
	out := make(map[string]Holder)
	for _, pod := range resp.GetPodResources() {
		for _, ctr := range pod.GetContainers() {
			for _, dev := range ctr.GetDevices() {
				if dev.GetResourceName() != p.resource {
					continue
				}
				for _, id := range dev.GetDeviceIds() {
					out[id] = Holder{Namespace: pod.GetNamespace(), Pod: pod.GetName(), Container: ctr.GetName()}
				}
			}
		}
	}
	return out, nil
}

// Close releases the connection.
func (p *PodResources) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn == nil {
		return nil
	}
	err := p.conn.Close()
	p.conn = nil
	return err
}

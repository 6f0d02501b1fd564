package metrics

import (
	"context"
	"fmt"

	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/hyperaccel/lpu-node/internal/podresources"
)

// PodResources asks the kubelet's PodResources service (v1 List) which
// container holds each device of one resource.
type PodResources struct {
	conn     *podresources.Conn
	resource string
}

var _ HolderLister = (*PodResources)(nil)

// NewPodResources returns a lister for resource on the kubelet's
// pod-resources socket. It connects lazily; Close releases the connection.
func NewPodResources(socket, resource string) *PodResources {
	return &PodResources{conn: podresources.New(socket), resource: resource}
}

// Holders lists the pods and maps each device ID of the resource to the
// container holding it. ctx bounds the call.
func (p *PodResources) Holders(ctx context.Context) (map[string]Holder, error) {
	c, err := p.conn.Lister()
	if err != nil {
		return nil, err
	}
	resp, err := c.List(ctx, &podresourcesapi.ListPodResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("list pod resources on %s: %w", p.conn.Socket(), err)
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
func (p *PodResources) Close() error { return p.conn.Close() }

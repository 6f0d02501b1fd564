package podresources

import (
	"context"
	"fmt"

	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// Holder is the container an allocated device belongs to.
type Holder struct{ Namespace, Pod, Container string }

// Holders lists the pods (v1 List) and maps each device ID of the
// resource to the container holding it. ctx bounds the call.
func (p *Client) Holders(ctx context.Context) (map[string]Holder, error) {
	c, err := p.Lister()
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

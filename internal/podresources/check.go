package podresources

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	podresv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// ErrMismatch is returned (wrapped) when the kubelet reports other devices
// than the annotation.
var ErrMismatch = errors.New("kubelet pod resources disagree with the allocation annotation")

// Check returns nil when the kubelet reports exactly ids (in any order) for
// the resource in the named container; an error wrapping ErrMismatch when it
// reports others (or none); another error when it cannot answer.
func (c *Client) Check(ctx context.Context, namespace, pod, container string, ids []string) error {
	got, err := c.Devices(ctx, namespace, pod, container)
	if err != nil {
		return err
	}
	want := slices.Sorted(slices.Values(ids))
	if !slices.Equal(got, want) {
		return fmt.Errorf("%w: kubelet assigned %s %v to %s/%s/%s, annotation says %v",
			ErrMismatch, c.resource, got, namespace, pod, container, want)
	}
	return nil
}

// Devices returns the sorted device IDs of the resource the kubelet assigned
// to the container.
func (c *Client) Devices(ctx context.Context, namespace, pod, container string) ([]string, error) {
	cl, err := c.Lister()
	if err != nil {
		return nil, err
	}
	if !c.noGet.Load() {
		rsp, err := cl.Get(ctx, &podresv1.GetPodResourcesRequest{PodName: pod, PodNamespace: namespace})
		switch status.Code(err) {
		case codes.OK:
			return c.pick([]*podresv1.PodResources{rsp.GetPodResources()}, namespace, pod, container)
		case codes.Unimplemented:
			c.noGet.Store(true)
		default:
			return nil, fmt.Errorf("pod resources Get %s/%s via %s: %w", namespace, pod, c.socket, err)
		}
	}
	rsp, err := cl.List(ctx, &podresv1.ListPodResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("pod resources List via %s: %w", c.socket, err)
	}
	return c.pick(rsp.GetPodResources(), namespace, pod, container)
}

func (c *Client) pick(pods []*podresv1.PodResources, namespace, pod, container string) ([]string, error) {
	for _, p := range pods {
		if p.GetName() != pod || p.GetNamespace() != namespace {
			continue
		}
		for _, ct := range p.GetContainers() {
			if ct.GetName() != container {
				continue
			}
			var ids []string
			for _, d := range ct.GetDevices() {
				if d.GetResourceName() == c.resource {
					ids = append(ids, d.GetDeviceIds()...)
				}
			}
			slices.Sort(ids)
			return ids, nil
		}
	}
	return nil, fmt.Errorf("%w: kubelet knows no container %s/%s/%s", ErrMismatch, namespace, pod, container)
}

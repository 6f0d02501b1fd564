package driver

import (
	"context"
	"fmt"
	"time"

	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/hyperaccel/lpu-node/pkg/alloc"
	"github.com/hyperaccel/lpu-node/pkg/arcslice"
	"github.com/hyperaccel/lpu-node/pkg/device"
)

// Republish asks Run's publisher for a new publication; it never blocks.
func (d *Driver) Republish() {
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// Resources returns what the node's pool should hold now: the arcs no
// prepared claim touches plus the arcs prepared claims were given, in the
// order pkg/alloc would pick them, unhealthy arcs tainted
// (arcslice.Builder.FreeSlices). It fails when the inventory cannot be published (a ring longer
// than a counter set holds), naming the ring.
func (d *Driver) Resources() (resourceslice.DriverResources, error) {
	snap, _ := d.devices.Snapshot()
	inv := snap.Inventory
	if inv == nil {
		inv = &device.Inventory{}
	}
	b, err := d.builderFor(inv)
	if err != nil {
		return resourceslice.DriverResources{}, err
	}
	// held before allocated: a claim prepared in between only adds an
	// arc that was free anyway, and its Prepare kicks another publish.
	held := d.held()
	sl := b.FreeSlices(held, d.allocated(), arcslice.Unhealthy(inv))
	if len(sl) == 0 {
		// A node without LPUs still publishes its pool, empty: "no
		// devices" is news, "no pool" is not.
		sl = []resourceslice.Slice{{}}
	}
	return resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{
		d.opts.NodeName: {Slices: sl},
	}}, nil
}

// allocated returns the arcs of this node's pool that prepared claims were
// given, from the checkpoint, admin claims included: they must stay
// published while allocated. A device name that is not an arc is skipped
// (Prepare refused it).
func (d *Driver) allocated() []alloc.Arc {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []alloc.Arc
	for _, c := range d.state.Claims {
		for _, dev := range c.Devices {
			if dev.Pool != d.opts.NodeName {
				continue
			}
			if a, err := arcslice.ParseDeviceName(dev.Device); err == nil {
				out = append(out, a)
			}
		}
	}
	return out
}

// builderFor returns the cached builder unless the inventory changed in
// more than health.
func (d *Driver) builderFor(inv *device.Inventory) (*arcslice.Builder, error) {
	key := shapeKey(inv)
	d.pubMu.Lock()
	defer d.pubMu.Unlock()
	if d.builder != nil && key == d.shapeKey {
		return d.builder, nil
	}
	b, err := arcslice.NewBuilder(inv, arcslice.Options{PCIeRoot: d.opts.PCIeRoot, Sizes: d.opts.ArcSizes})
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", d.opts.NodeName, err)
	}
	d.builder, d.shapeKey = b, key
	return b, nil
}

// shapeKey is everything of inv the slices depend on except health.
func shapeKey(inv *device.Inventory) string {
	devs := make([]device.Device, len(inv.Devices))
	for i, dev := range inv.Devices {
		dev.Health = device.Health{}
		devs[i] = dev
	}
	return fmt.Sprintf("%v|%v|%s", devs, inv.Rings, inv.DriverVersion)
}

// Publish computes the pool and hands it to p. A pool that cannot be built
// is not published (the last good one stays), and the error is returned.
func (d *Driver) Publish(ctx context.Context, p Publisher) error {
	res, err := d.Resources()
	if err != nil {
		return err
	}
	if err := p.PublishResources(ctx, res); err != nil {
		if ctx.Err() != nil {
			return nil // shutting down
		}
		return fmt.Errorf("publish resource slices: %w", err)
	}
	d.opts.Metrics.republished()
	return nil
}

// RunPublisher publishes now and again whenever Prepare, Unprepare or the
// devices change, until ctx ends. A node whose rings cannot be published
// at start is an error (a configuration problem); every other failure (the
// API server away) is logged and retried with backoff from 1 s to 30 s,
// while prepared claims keep being served.
func (d *Driver) RunPublisher(ctx context.Context, p Publisher) error {
	if _, err := d.Resources(); err != nil {
		return err
	}
	retry := time.NewTimer(0)
	defer retry.Stop()
	backoff := time.Second
	_, changed := d.devices.Snapshot()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
			_, changed = d.devices.Snapshot()
		case <-d.kick:
		case <-retry.C:
		}
		if err := d.Publish(ctx, p); err != nil {
			d.log.Error("cannot publish resource slices, retrying", "err", err, "in", backoff)
			retry.Reset(backoff)
			backoff = min(2*backoff, 30*time.Second)
			continue
		}
		backoff = time.Second
	}
}

// holdsUnhealthy is used by health reports: the first unhealthy LPU of ids.
func holdsUnhealthy(inv *device.Inventory, ids []string) (device.Device, bool) {
	for _, id := range ids {
		dev, ok := inv.Device(id)
		if !ok {
			return device.Device{ID: id, Health: device.Health{Reason: "LPU " + id + " is gone"}}, true
		}
		if !dev.Health.Healthy {
			return dev, true
		}
	}
	return device.Device{}, false
}

package driver

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"k8s.io/dynamic-resource-allocation/resourceslice"

	checkpoint "github.com/hyperaccel/lpu-node/internal/dracheckpoint"
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
// (arcslice.Builder.FreeSlices). It fails when the inventory cannot be
// published (a ring longer than a counter set holds), naming the ring.
func (d *Driver) Resources() (resourceslice.DriverResources, error) {
	res, _, err := d.resources()
	return res, err
}

// resources is Resources and, from the same view, the node labels' values:
// what a new claim could still be given, never below what a prepared
// claim holds (arcslice.Free.Holding).
func (d *Driver) resources() (resourceslice.DriverResources, arcslice.Free, error) {
	snap, _ := d.devices.Snapshot()
	inv := snap.Inventory
	if inv == nil {
		inv = &device.Inventory{}
	}
	b, err := d.builderFor(inv)
	if err != nil {
		return resourceslice.DriverResources{}, arcslice.Free{}, err
	}
	// Held LPUs and allocated arcs from one read of the checkpoint (the
	// other driver pod of a rolling update may have changed it).
	s := d.current()
	held := append(s.Held(), d.devicePluginHeld()...)
	if !d.devicePluginKnown() {
		// Fail closed: until PodResources answers, any LPU may be a
		// device-plugin pod's, so none is offered (allocated arcs stay).
		for _, dev := range inv.Devices {
			held = append(held, dev.ID)
		}
	}
	sick := arcslice.Unhealthy(inv)
	sl := b.FreeSlices(held, allocatedArcs(s, d.opts.NodeName), sick)
	if len(sl) == 0 {
		// A node without LPUs still publishes its pool, empty: "no
		// devices" is news, "no pool" is not.
		sl = []resourceslice.Slice{{}}
	}
	free := b.Free(held, sick)
	for _, c := range s.Claims {
		free = free.Holding(claimArcs(c, d.opts.NodeName))
	}
	return resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{
		d.opts.NodeName: {Slices: sl},
	}}, free, nil
}

// allocatedArcs returns the arcs of pool that the prepared claims of s were
// given, admin claims included: they must stay published while allocated.
func allocatedArcs(s *checkpoint.State, pool string) []alloc.Arc {
	var out []alloc.Arc
	for _, c := range s.Claims {
		out = append(out, claimArcs(c, pool)...)
	}
	return out
}

// claimArcs returns the arcs of pool that prepared claim c was given. A
// device name that is not an arc is skipped (Prepare refused it).
func claimArcs(c checkpoint.Claim, pool string) []alloc.Arc {
	var out []alloc.Arc
	for _, dev := range c.Devices {
		if dev.Pool != pool {
			continue
		}
		if a, err := arcslice.ParseDeviceName(dev.Device); err == nil {
			out = append(out, a)
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
	res, free, err := d.resources()
	if err != nil {
		return err
	}
	if d.opts.NodeLabels != nil {
		// Before the slices: a raised label lets the scheduler try the
		// node, whose DRA filter then still decides.
		d.opts.NodeLabels.Set(free.Labels())
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

// RunPublisher publishes now and again whenever Prepare, Unprepare, the
// devices or the checkpoint file (written by another instance during a
// rolling update; polled every Options.FollowInterval) change, until ctx
// ends. A node whose rings cannot be published
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
	follow := time.NewTicker(cmp.Or(d.opts.FollowInterval, time.Second))
	defer follow.Stop()
	seen := d.checkpointStamp()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
			_, changed = d.devices.Snapshot()
		case <-d.kick:
		case <-retry.C:
		case <-follow.C:
			// The other pod of a rolling update prepares claims too: its
			// saves show as a new checkpoint file.
			if now := d.checkpointStamp(); now == seen {
				continue
			}
		}
		seen = d.checkpointStamp()
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

// stamp tells checkpoint files apart: a save renames a new file into
// place, so the inode changes with every save.
type stamp struct {
	ino   uint64
	mtime time.Time
	size  int64
}

// checkpointStamp is the checkpoint file's stamp, zero when it is missing.
func (d *Driver) checkpointStamp() stamp {
	st, err := os.Stat(filepath.Join(d.opts.StateDir, checkpoint.FileName))
	if err != nil {
		return stamp{}
	}
	s := stamp{mtime: st.ModTime(), size: st.Size()}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		s.ino = sys.Ino
	}
	return s
}

package driver

import (
	"context"
	"time"

	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/hyperaccel/lpu-node/pkg/arcslice"
	"github.com/hyperaccel/lpu-node/pkg/device"
)

// healthResend re-sends an unchanged report well inside the kubelet's
// default 30 s health timeout.
const healthResend = 10 * time.Second

// WatchHealthStatus reports the health of every published arc: Unhealthy,
// naming the LPU and why, when any of its LPUs is; a new report on every
// device change and every 10 s.
func (d *Driver) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	tick := time.NewTicker(healthResend)
	defer tick.Stop()
	for {
		report, changed := d.healthReport()
		select {
		case <-ctx.Done():
			return nil
		case reports <- report:
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-tick.C:
		}
	}
}

func (d *Driver) healthReport() (kubeletplugin.DeviceHealthReport, <-chan struct{}) {
	snap, changed := d.devices.Snapshot()
	var r kubeletplugin.DeviceHealthReport
	if snap.Layout == nil || snap.Inventory == nil {
		return r, changed
	}
	now := time.Now()
	for _, a := range snap.Layout.Arcs() {
		h := kubeletplugin.DeviceHealth{PoolName: d.opts.NodeName, DeviceName: arcslice.DeviceName(a),
			Health: kubeletplugin.HealthStatusHealthy, LastUpdated: now}
		if bad, sick := holdsUnhealthy(snap.Inventory, snap.Layout.ArcIDs(a)); sick {
			h.Health = kubeletplugin.HealthStatusUnhealthy
			h.Message = bad.ID + ": " + bad.Health.Reason
		}
		r.Devices = append(r.Devices, h)
		if a.Size == 1 { // the LPU's count device holds the same LPU
			h.DeviceName = arcslice.CountDeviceName(a)
			r.Devices = append(r.Devices, h)
		}
	}
	return r, changed
}

// holdsUnhealthy is the first unhealthy LPU of ids.
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

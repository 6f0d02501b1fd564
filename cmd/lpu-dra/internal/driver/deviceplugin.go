package driver

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/hyperaccel/lpu-node/internal/podresources"
)

// DefaultDevicePluginInterval is how often the driver re-reads which LPUs
// device-plugin pods hold: a held LPU comes back to the pool at most this
// long after its pod ended.
const DefaultDevicePluginInterval = 10 * time.Second

// devicePluginTimeout bounds one PodResources read.
const devicePluginTimeout = 2 * time.Second

// DevicePluginMaxAge is how old the view of the LPUs device-plugin pods
// hold may be when Prepare gives LPUs to a new claim; an older one is read
// again first, so a device-plugin pod admitted during a mode switch is
// seen within about a second, not a whole DevicePluginInterval.
const DevicePluginMaxAge = time.Second

// DevicePluginHolders lists, by LPU ID, the containers the kubelet's
// PodResources shows holding the device plugin's resource
// (*podresources.Client).
type DevicePluginHolders interface {
	Holders(ctx context.Context) (map[string]podresources.Holder, error)
}

// dpView is the device-plugin view as the state and the publisher read it.
type dpView struct{ d *Driver }

// Known says whether PodResources answered once (devicePluginKnown).
func (v dpView) Known() bool { return v.d.devicePluginKnown() }

// Holder is the device-plugin pod holding LPU id, if any.
func (v dpView) Holder(id string) (podresources.Holder, bool) { return v.d.devicePluginHolder(id) }

// Held lists the LPUs device-plugin pods hold, sorted.
func (v dpView) Held() []string { return v.d.devicePluginHeld() }

// devicePluginHolder is the device-plugin pod holding LPU id, if any.
func (d *Driver) devicePluginHolder(id string) (podresources.Holder, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	h, ok := d.dpHeld[id]
	return h, ok
}

// devicePluginKnown says whether the driver knows which LPUs device-plugin
// pods hold: PodResources answered once, or the driver reads none
// (Options.DevicePlugin nil). Until then it publishes no free LPU and
// Prepare refuses new claims.
func (d *Driver) devicePluginKnown() bool {
	if d.opts.DevicePlugin == nil {
		return true
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.dpKnown
}

// refreshDevicePlugin reads Options.DevicePlugin again when the last
// answer is older than DevicePluginMaxAge (or there was none); an error
// says the view is stale and a new claim must not be given LPUs by it.
func (d *Driver) refreshDevicePlugin(ctx context.Context) error {
	if d.opts.DevicePlugin == nil {
		return nil
	}
	d.mu.Lock()
	fresh := d.dpKnown && time.Since(d.dpAt) <= DevicePluginMaxAge
	d.mu.Unlock()
	if fresh {
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, devicePluginTimeout)
	defer cancel()
	held, err := d.opts.DevicePlugin.Holders(rctx)
	if err != nil {
		return fmt.Errorf("read which LPUs device-plugin pods hold (kubelet PodResources): %w", err)
	}
	d.setDevicePluginHeld(held)
	return nil
}

// devicePluginHeld lists the LPUs device-plugin pods hold, sorted.
func (d *Driver) devicePluginHeld() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Sorted(maps.Keys(d.dpHeld))
}

// WatchDevicePlugin reads Options.DevicePlugin now and every
// Options.DevicePluginInterval until ctx ends, and republishes when the
// LPUs held by device-plugin pods change. Those LPUs leave the published
// pool and Prepare refuses them: on a node moved from the device plugin to
// DRA without draining (the kubelet keeps running its device-plugin pods),
// the scheduler must not hand them to a claim. Until the first successful
// read every LPU counts as held (devicePluginKnown); a later failed read
// keeps the last set. Failures are logged once per change; it returns nil
// at once without Options.DevicePlugin.
func (d *Driver) WatchDevicePlugin(ctx context.Context) error {
	if d.opts.DevicePlugin == nil {
		return nil
	}
	tick := time.NewTicker(cmp.Or(d.opts.DevicePluginInterval, DefaultDevicePluginInterval))
	defer tick.Stop()
	var lastErr string
	for {
		rctx, cancel := context.WithTimeout(ctx, devicePluginTimeout)
		held, err := d.opts.DevicePlugin.Holders(rctx)
		cancel()
		switch {
		case err != nil && ctx.Err() == nil:
			if err.Error() != lastErr {
				if d.devicePluginKnown() {
					d.log.Warn("cannot read which LPUs device-plugin pods hold (kubelet PodResources); keeping the last answer", "err", err)
				} else {
					d.log.Error("cannot read which LPUs device-plugin pods hold (kubelet PodResources); publishing no free LPU and preparing no new claim until it answers (check kubelet.podResourcesSocket and its mount)", "err", err)
				}
			}
			lastErr = err.Error()
		case err == nil:
			if lastErr != "" {
				d.log.Info("reading the kubelet's PodResources again")
			}
			lastErr = ""
			d.setDevicePluginHeld(held)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// setDevicePluginHeld records held, logging and republishing on a change.
func (d *Driver) setDevicePluginHeld(held map[string]podresources.Holder) {
	d.mu.Lock()
	first := !d.dpKnown
	changed := first || !maps.Equal(held, d.dpHeld)
	d.dpHeld, d.dpKnown, d.dpAt = held, true, time.Now()
	d.mu.Unlock()
	if !changed {
		return
	}
	d.opts.Metrics.setDevicePluginHeld(len(held))
	if len(held) > 0 {
		d.log.Error("device-plugin pods hold LPUs on this DRA node: not publishing them until those pods end (drain the node before moving it to DRA)",
			"lpus", slices.Sorted(maps.Keys(held)), "holders", holderNames(held))
	} else if first {
		d.log.Info("the kubelet's PodResources shows no device-plugin pod holding an LPU; publishing every LPU")
	} else {
		d.log.Info("no device-plugin pod holds an LPU any more; publishing every LPU")
	}
	d.Republish()
}

// holderNames are the namespace/pod names among held, sorted, once each.
func holderNames(held map[string]podresources.Holder) []string {
	var out []string
	for _, h := range held {
		if n := h.Namespace + "/" + h.Pod; !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

package state

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"

	resourceapi "k8s.io/api/resource/v1"

	checkpoint "github.com/hyperaccel/lpu-node/internal/dracheckpoint"
	"github.com/hyperaccel/lpu-node/internal/health"
	"github.com/hyperaccel/lpu-node/internal/podresources"
	"github.com/hyperaccel/lpu-node/pkg/arcslice"
	"github.com/hyperaccel/lpu-node/pkg/inject"
)

// DevicePlugin is what Prepare asks of the LPUs device-plugin pods hold
// (the kubelet's PodResources, read by the driver).
type DevicePlugin interface {
	// Known says whether PodResources answered once (or is not read).
	Known() bool
	// Holder is the device-plugin pod holding LPU id, if any.
	Holder(id string) (podresources.Holder, bool)
}

// Request is one claim to prepare, as the driver read it.
type Request struct {
	Claim   *resourceapi.ResourceClaim
	Devices []checkpoint.Device // the claim's devices of this driver and pool
	Admin   bool                // allocated with adminAccess: holds nothing, held by nothing
	Pods    []string            // the pods it is reserved for, sorted
	// DevicePlugin is the device-plugin view (nil: not looked at);
	// DevicePluginErr, when set, says it could not be read fresh: a
	// tenant claim is refused.
	DevicePlugin    DevicePlugin
	DevicePluginErr error
}

// Prepare prepares the claim under the checkpoint lock: the claim as
// recorded (its pods set to r.Pods), or newly prepared (added: its spec
// written, then the checkpoint saved). A spec written for a checkpoint
// that could not be saved is removed under the lock. A claim with none
// of our devices returns a zero claim. Every error is a *Refusal; c.LPUs
// names the LPUs resolved so far.
func (s *State) Prepare(ctx context.Context, r Request) (c checkpoint.Claim, added bool, err error) {
	uid := string(r.Claim.UID)
	// Once the lock is released, another instance (a surge update) may
	// prepare the claim and write its own spec of that name.
	undo := func() {
		if !added {
			return
		}
		if rmErr := s.cdi.RemoveSpec(SpecFile(uid)); rmErr != nil {
			s.log.Warn("cannot remove the spec of a claim whose checkpoint failed", "uid", uid, "err", rmErr)
		}
		if specRemovedHook != nil {
			specRemovedHook()
		}
	}
	err = s.updateOrUndo(ctx, "prepare", func(cur *checkpoint.State) (bool, error) {
		var changed bool
		var err error
		c, added, changed, err = s.prepareIn(cur, r)
		return changed, err
	}, undo)
	var ref *Refusal
	switch {
	case err != nil && added: // the spec was written, the checkpoint not: undo removed the spec
		return c, false, Refuse(ReasonWrite, "%w", err)
	case errors.As(err, &ref):
		return c, false, err
	case err != nil:
		return c, false, Refuse(ReasonWrite, "%w", err)
	}
	return c, added, nil
}

// prepareIn prepares the claim in cur, the checkpoint as it is on disk
// under the lock. changed says cur must be saved.
func (s *State) prepareIn(cur *checkpoint.State, r Request) (c checkpoint.Claim, added, changed bool, err error) {
	uid := string(r.Claim.UID)
	if c, ok := cur.Claims[uid]; ok {
		if !slices.Equal(c.Devices, r.Devices) {
			return c, false, false, Refuse(ReasonChanged, "already prepared with devices %v, now asked for %v", Names(c.Devices), Names(r.Devices))
		}
		if c.AdminAccess != r.Admin {
			return c, false, false, Refuse(ReasonChanged, "already prepared with adminAccess %v, now asked with adminAccess %v", c.AdminAccess, r.Admin)
		}
		// The kubelet prepares a claim once per node; should it ask again,
		// the claim's reservedFor now is the truth (reservations keeps it).
		c, changed = WithPods(c, r.Pods)
		cur.Claims[uid] = c
		return c, false, changed, nil
	}
	if len(r.Devices) == 0 {
		return checkpoint.Claim{}, false, false, nil
	}
	snap, _ := s.devices.Snapshot()
	if snap.Layout == nil || snap.Inventory == nil {
		return c, false, false, Refuse(ReasonNotReady, "device discovery has not produced a valid ring layout yet")
	}
	inv := snap.Inventory
	ids, err := resolve(cur, snap, r)
	if err != nil {
		return c, false, false, err
	}
	p, err := snap.Layout.Check(ids)
	if err != nil {
		return c, false, false, Refuse(ReasonBadDevice, "%w", err)
	}
	c.LPUs = p.IDs
	devs, err := lookup(inv, p.IDs)
	if err != nil {
		return c, false, false, Refuse(ReasonBadDevice, "%w", err)
	}
	if err := s.writeSpec(uid, devs, inv.DriverVersion); err != nil {
		return c, false, false, Refuse(ReasonWrite, "%w", err)
	}
	c = checkpoint.Claim{UID: uid, Namespace: r.Claim.Namespace, Name: r.Claim.Name, Devices: r.Devices, LPUs: p.IDs,
		CDIDevice: inject.ClaimDeviceID(uid), SpecName: SpecFile(uid), Pods: r.Pods, AdminAccess: r.Admin}
	cur.Claims[uid] = c
	return c, true, true, nil
}

// resolve turns the claim's devices into LPU IDs, refusing an arc this node
// does not have, overlapping devices, and LPUs that are unknown, unhealthy
// or held by another claim in cur (an admin claim holds nothing and is
// held by nothing) or by a device-plugin pod.
func resolve(cur *checkpoint.State, snap health.Snapshot, r Request) ([]string, error) {
	var ids []string
	for _, dev := range r.Devices {
		arc, err := arcslice.ParseDeviceName(dev.Device)
		if err != nil {
			return nil, Refuse(ReasonBadDevice, "%w", err)
		}
		arcIDs := snap.Layout.ArcIDs(arc)
		if arcIDs == nil || (arc.Size == len(snap.Layout.Rings()[arc.Ring]) && arc.Start != 0) {
			return nil, Refuse(ReasonBadDevice, "device %s is not an arc of this node", dev.Device)
		}
		for _, id := range arcIDs {
			if slices.Contains(ids, id) {
				return nil, Refuse(ReasonBadDevice, "devices of the claim overlap on %s", id)
			}
			if err := admit(cur, snap, r, dev.Device, id); err != nil {
				return nil, err
			}
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// admit refuses LPU id of device dev when it is unknown, unhealthy or, to
// a tenant claim, held (by a claim in cur or a device-plugin pod) or
// possibly held (the device-plugin view not known or stale).
func admit(cur *checkpoint.State, snap health.Snapshot, r Request, dev, id string) error {
	lpu, ok := snap.Inventory.Device(id)
	if !ok {
		return Refuse(ReasonBadDevice, "device %s: LPU %s is unknown to discovery", dev, id)
	}
	if !lpu.Health.Healthy {
		return Refuse(ReasonUnhealthy, "device %s: LPU %s is unhealthy: %s", dev, id, lpu.Health.Reason)
	}
	if r.Admin {
		return nil
	}
	if holder := cur.Holder(id); holder != "" {
		c := cur.Claims[holder]
		return Refuse(ReasonHeld, "device %s: LPU %s is held by claim %s/%s (%s)", dev, id, c.Namespace, c.Name, holder)
	}
	if r.DevicePlugin == nil {
		return nil
	}
	if !r.DevicePlugin.Known() {
		return Refuse(ReasonNotReady, "device %s: the kubelet's PodResources has not answered yet, so a device-plugin pod may hold LPU %s", dev, id)
	}
	if r.DevicePluginErr != nil {
		return Refuse(ReasonNotReady, "device %s: a device-plugin pod may hold LPU %s: %w", dev, id, r.DevicePluginErr)
	}
	if h, ok := r.DevicePlugin.Holder(id); ok {
		return Refuse(ReasonHeld, "device %s: LPU %s is held by device-plugin pod %s/%s (container %s): the node moved to DRA while it runs; the LPU is published again once that pod ends",
			dev, id, h.Namespace, h.Pod, h.Container)
	}
	return nil
}

// WithPods returns c reserved for pods (sorted), so that lpu-nri admits its
// CDI device in their containers and no other pod's; changed says c.Pods
// differed.
func WithPods(c checkpoint.Claim, pods []string) (checkpoint.Claim, bool) {
	if len(pods) == 0 {
		pods = nil
	}
	if slices.Equal(pods, c.Pods) {
		return c, false
	}
	c.Pods = pods
	return c, true
}

// Names are devs as "request:device", for messages.
func Names(devs []checkpoint.Device) []string {
	out := make([]string, len(devs))
	for i, d := range devs {
		out[i] = d.Request + ":" + d.Device
	}
	return out
}

// Unprepare removes the claim's spec, then its checkpoint entry, and
// returns the claim removed; a zero claim when uid is not prepared. A
// failed save keeps the claim; its spec comes back with the next Heal.
func (s *State) Unprepare(ctx context.Context, uid string) (checkpoint.Claim, error) {
	var c checkpoint.Claim
	err := s.Update(ctx, "unprepare", func(cur *checkpoint.State) (bool, error) {
		var ok bool
		if c, ok = cur.Claims[uid]; !ok {
			return false, nil
		}
		if err := s.cdi.RemoveSpec(c.SpecName); err != nil {
			return false, fmt.Errorf("remove cdi spec %s: %w", filepath.Join(s.opts.CDIDir, c.SpecName), err)
		}
		delete(cur.Claims, uid)
		return true, nil
	})
	if err != nil {
		return checkpoint.Claim{}, err
	}
	return c, nil
}

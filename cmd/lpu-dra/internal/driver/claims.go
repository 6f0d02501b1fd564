package driver

import (
	"cmp"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	checkpoint "github.com/hyperaccel/lpu-node/internal/dracheckpoint"
)

// The kubelet calls NodePrepareResources once per claim and node, not once
// per pod: a pod that joins a prepared (shared) claim later is never
// announced to the driver. The pods lpu-nri admits for a claim therefore
// come from the apiserver's claim status.reservedFor, which the
// reservations package reads and hands to SyncReservedFor; Prepare records
// the reservedFor it was given as the first value.

// PreparedClaim names a prepared claim on the apiserver.
type PreparedClaim struct {
	types.NamespacedName
	UID types.UID
}

// PreparedClaims lists the prepared claims, sorted by namespace and name.
func (d *Driver) PreparedClaims() []PreparedClaim {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]PreparedClaim, 0, len(d.state.Claims))
	for uid, c := range d.state.Claims {
		out = append(out, PreparedClaim{NamespacedName: types.NamespacedName{Namespace: c.Namespace, Name: c.Name}, UID: types.UID(uid)})
	}
	slices.SortFunc(out, func(a, b PreparedClaim) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
	})
	return out
}

// SyncReservedFor makes the pods of the prepared claim uid those the
// apiserver's claim reserves it for. claim is what the apiserver returned
// for the prepared claim's namespace and name; nil (not found), another
// UID (deleted and recreated) or a claim no longer allocated leave the
// claim prepared (the kubelet unprepares it) but reserved for no pod. It
// reports whether the checkpoint changed; an unknown uid is a no-op.
func (d *Driver) SyncReservedFor(uid types.UID, claim *resourceapi.ResourceClaim) (bool, error) {
	var pods []string
	if claim != nil && claim.UID == uid && claim.Status.Allocation != nil {
		pods = podUIDs(claim)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	c, ok := d.state.Claims[string(uid)]
	if !ok || slices.Equal(c.Pods, pods) {
		return false, nil
	}
	old := c.Pods
	if err := d.setPods(c, pods); err != nil {
		return false, err
	}
	d.log.Info("claim reservations changed", "claim", c.Namespace+"/"+c.Name, "uid", uid, "pods", pods, "was", old)
	return true, nil
}

// setPods records the pods a claim is reserved for, so that lpu-nri admits
// its CDI device in their containers and no other pod's. d.mu is held.
func (d *Driver) setPods(c checkpoint.Claim, pods []string) error {
	if len(pods) == 0 {
		pods = nil
	}
	if slices.Equal(pods, c.Pods) {
		return nil
	}
	old := c
	c.Pods = pods
	d.state.Claims[c.UID] = c
	if err := checkpoint.Save(d.opts.StateDir, d.state); err != nil {
		d.state.Claims[c.UID] = old
		return err
	}
	return nil
}

package driver

import (
	"cmp"
	"context"
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
	claims := d.Prepared()
	out := make([]PreparedClaim, 0, len(claims))
	for uid, c := range claims {
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
func (d *Driver) SyncReservedFor(ctx context.Context, uid types.UID, claim *resourceapi.ResourceClaim) (bool, error) {
	var pods []string
	if claim != nil && claim.UID == uid && claim.Status.Allocation != nil {
		pods = podUIDs(claim)
	}
	var c checkpoint.Claim
	var old []string
	changed := false
	err := d.update(ctx, "reservations", func(s *checkpoint.State) (bool, error) {
		var ok bool
		if c, ok = s.Claims[string(uid)]; !ok {
			return false, nil
		}
		old = c.Pods
		c, changed = withPods(c, pods)
		s.Claims[string(uid)] = c
		return changed, nil
	})
	if err != nil || !changed {
		return false, err
	}
	d.log.Info("claim reservations changed", "claim", c.Namespace+"/"+c.Name, "uid", uid, "pods", pods, "was", old)
	return true, nil
}

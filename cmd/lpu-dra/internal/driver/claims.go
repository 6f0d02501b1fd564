package driver

import (
	"cmp"
	"context"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/hyperaccel/lpu-node/cmd/lpu-dra/internal/state"
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
// UID (deleted and recreated), a claim no longer allocated, or one whose
// allocation of our driver's devices is no longer what was prepared (it
// was deallocated and allocated again while a stale preparation stayed,
// e.g. after a failed unprepare: the kubelet reuses a preparation by claim
// UID alone) leave the claim prepared (the kubelet unprepares it) but
// reserved for no pod. A stale preparation is logged and counted in
// lpu_dra_stale_preparations_total. Of a claim generated for one pod only
// that pod is taken (ownPods): another pod that names it by
// resourceClaimName is logged and never admitted. It reports whether the checkpoint
// changed; an unknown uid is a no-op.
func (d *Driver) SyncReservedFor(ctx context.Context, uid types.UID, claim *resourceapi.ResourceClaim) (bool, error) {
	var pods []string
	var now []checkpoint.Device
	var admin bool
	allocated := claim != nil && claim.UID == uid && claim.Status.Allocation != nil
	if allocated {
		var err error
		if now, admin, err = d.ourDevices(claim); err != nil {
			now = nil // a foreign pool or mixed admin devices: matches nothing prepared
		}
		pods = ownPods(claim)
		if foreign := foreignPods(claim); len(foreign) > 0 {
			d.log.Error("claim generated for one pod is reserved for other pods too; admitting only its own pod",
				"claim", claim.Namespace+"/"+claim.Name, "uid", uid, "owner", ownerName(claim), "foreign", foreign)
		}
	}
	var c checkpoint.Claim
	var old []string
	changed, stale := false, false
	err := d.state.Update(ctx, "reservations", func(s *checkpoint.State) (bool, error) {
		var ok bool
		if c, ok = s.Claims[string(uid)]; !ok {
			return false, nil
		}
		if allocated && (!slices.Equal(c.Devices, now) || c.AdminAccess != admin) {
			stale, pods = true, nil
		}
		old = c.Pods
		c, changed = state.WithPods(c, pods)
		s.Claims[string(uid)] = c
		return changed, nil
	})
	if err != nil {
		return false, err
	}
	if allocated && !stale {
		d.rememberPods(claim)
	}
	if stale {
		d.opts.Metrics.stalePreparation()
		d.log.Error("claim was allocated again since it was prepared; admitting no pod for the stale preparation until the kubelet unprepares it",
			"claim", c.Namespace+"/"+c.Name, "uid", uid, "prepared", state.Names(c.Devices), "preparedAdminAccess", c.AdminAccess,
			"allocated", state.Names(now), "allocatedAdminAccess", admin, "reservedFor", podUIDs(claim))
	}
	if !changed {
		return false, nil
	}
	d.log.Info("claim reservations changed", "claim", c.Namespace+"/"+c.Name, "uid", uid, "pods", pods, "was", old)
	return true, nil
}

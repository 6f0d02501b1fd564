package verify

import (
	"context"
	"errors"

	"github.com/containerd/nri/pkg/api"

	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/inventory"
	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/nriedit"
	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/inject"
)

// Decide applies the trust rules (package doc) in order and returns the
// adjustment with the verified allocation (IDs in ring order, and its
// allocation ID when the device plugin wrote one), an empty allocation for
// a container without one, or a *Refusal that is the refusing rule's
// error under errors.Is. Apart from the optional cross-check and the
// claims read it does no I/O.
func (v *Verifier) Decide(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, inject.Allocation, error) {
	var none inject.Allocation
	if err := checkPodAnnotations(pod); err != nil {
		return nil, none, err
	}
	if err := checkOneVisibleDevices(ctr); err != nil {
		return nil, none, err
	}
	if claims := claimUIDs(ctr.GetCDIDevices()); len(claims) > 0 {
		return nil, none, v.decideClaims(pod, ctr, claims)
	}
	alloc, sealed, err := v.checkSealedAllocation(ctr)
	if err != nil {
		return nil, none, err
	}
	if !sealed {
		if err := v.checkNoOtherLPU(v.store.Load(), pod, ctr, nil); err != nil {
			return nil, none, err
		}
		return nriedit.Adjustment(inject.Unallocated()), none, nil
	}
	snap := v.store.Load()
	var buf [8]device.Device // a server's ring of 8 fits without a heap copy; more spill over
	devs, err := v.checkKnownHealthy(snap, alloc.IDs, false, buf[:0])
	if err != nil {
		return nil, none, err
	}
	if err := v.checkPodResources(ctx, pod, ctr, alloc.IDs); err != nil {
		return nil, none, err
	}
	if err := v.checkNoOtherLPU(snap, pod, ctr, alloc.IDs); err != nil {
		return nil, none, err
	}
	if err := v.checkReplayLedger(pod, alloc); err != nil {
		return nil, none, err
	}
	return nriedit.Adjustment(inject.ForDevices(devs, snap.DriverVersion(), v.opts)), alloc, nil
}

// decideClaims admits a container whose LPUs come from DRA claims (Prepared
// claims): the runtime applied the claims' CDI specs (nodes, mounts,
// LPU_VISIBLE_DEVICES), so nothing is added once lpu-dra's checkpoint says
// the claims were prepared for this pod; their LPUs are then the
// container's verified allocation, under the same rules as a sealed one.
func (v *Verifier) decideClaims(pod *api.PodSandbox, ctr *api.Container, claims []string) error {
	ids, err := v.checkPreparedClaims(pod, claims)
	if err != nil {
		return err
	}
	snap := v.store.Load()
	var buf [8]device.Device
	if _, err := v.checkKnownHealthy(snap, ids, true, buf[:0]); err != nil {
		return err
	}
	return v.checkNoOtherLPU(snap, pod, ctr, ids)
}

// checkPodAnnotations is rule 1, Pod annotations.
func checkPodAnnotations(pod *api.PodSandbox) error {
	if key, ok := inject.HasReservedKey(pod.GetAnnotations()); ok {
		return refuse(ErrPodAnnotations, ReasonPodAnnotation,
			"pod annotation %q is reserved for the LPU device plugin; a pod cannot claim LPUs through annotations (runtimes copy pod annotations into containers): remove it from the pod", key)
	}
	return nil
}

// checkOneVisibleDevices is rule 2, One LPU_VISIBLE_DEVICES.
func checkOneVisibleDevices(ctr *api.Container) error {
	if n := visibleDevicesCopies(ctr.GetEnv()); n > 1 {
		return refuse(ErrOneVisibleDevices, ReasonBadValue,
			"container env sets %s %d times (image and pod spec both set it?): the runtime would keep the last copy instead of the value lpu-nri sets, so set it at most once (lpu-nri overrides it anyway)",
			inject.EnvVisibleDevices, n)
	}
	return nil
}

// checkSealedAllocation is rule 3, Sealed allocation: the container's
// allocation, and whether it has one at all.
func (v *Verifier) checkSealedAllocation(ctr *api.Container) (inject.Allocation, bool, error) {
	alloc, err := v.key.OpenAllocation(ctr.GetAnnotations())
	switch {
	case errors.Is(err, inject.ErrNoAllocation):
		return alloc, false, nil
	case errors.Is(err, inject.ErrBadSeal):
		return alloc, false, refuse(ErrSealedAllocation, ReasonBadSeal, "allocation annotation not sealed by this node's device plugin: %w", err)
	case err != nil:
		return alloc, false, refuse(ErrSealedAllocation, ReasonBadValue, "allocation annotation invalid: %w", err)
	}
	return alloc, true, nil
}

// checkKnownHealthy is rule 4, Known, healthy LPUs: it appends the devices
// of ids to devs. claimed names them as a claim's LPUs in the refusal.
func (v *Verifier) checkKnownHealthy(snap *inventory.Snapshot, ids []string, claimed bool, devs []device.Device) ([]device.Device, error) {
	what := "allocated"
	if claimed {
		what = "claimed"
	}
	if !snap.Ready() {
		subject := inject.EncodeIDs(ids)
		if claimed {
			subject = "claim LPUs " + subject
		}
		return nil, refuse(ErrKnownHealthy, ReasonNoInventory, "no LPU inventory yet (%v); cannot verify %s", snap.Err, subject)
	}
	for _, id := range ids {
		d, ok := snap.Device(id)
		if !ok {
			v.store.Kick() // the inventory may be behind the device plugin's
			return nil, refuse(ErrKnownHealthy, ReasonUnknownDevice, "%s device %q is not on this node (known: %d LPUs)", what, id, len(snap.Inventory.Devices))
		}
		if !d.Health.Healthy {
			return nil, refuse(ErrKnownHealthy, ReasonUnhealthyDevice, "%s device %s is unhealthy: %s", what, id, d.Health.Reason)
		}
		devs = append(devs, *d)
	}
	return devs, nil
}

// checkPodResources is rule 5, PodResources agree (when configured),
// bounded by the check timeout.
func (v *Verifier) checkPodResources(ctx context.Context, pod *api.PodSandbox, ctr *api.Container, ids []string) error {
	if v.check == nil {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, v.checkTimeout)
	defer cancel()
	if err := v.check.Check(cctx, pod.GetNamespace(), pod.GetName(), ctr.GetName(), ids); err != nil {
		return refuse(ErrPodResources, ReasonPodResources, "kubelet pod resources check: %w", err)
	}
	return nil
}

// checkNoOtherLPU is rule 6, No other LPU, on what the container already
// carries (runtimes without validators never ask): LPU nodes beyond ids
// (foreignNodes), or device cgroup rules admitting LPUs beyond ids
// (checkCgroup).
func (v *Verifier) checkNoOtherLPU(snap *inventory.Snapshot, pod *api.PodSandbox, ctr *api.Container, ids []string) error {
	if len(ctr.GetLinux().GetDevices()) == 0 && len(ctr.GetLinux().GetResources().GetDevices()) == 0 {
		return nil // carries nothing: the common case
	}
	if !snap.Ready() {
		return nil // nothing is known to be an LPU; the validator refuses later
	}
	if err := v.foreignNodes(snap, pod, ctr, ids); err != nil {
		return err
	}
	return v.checkCgroup(snap, pod, ctr, ids)
}

// checkReplayLedger is rule 7, Replay ledger (when configured), for an
// allocation with an ID.
func (v *Verifier) checkReplayLedger(pod *api.PodSandbox, alloc inject.Allocation) error {
	if v.ledger == nil || alloc.ID == "" {
		return nil
	}
	if err := v.claimAllocation(alloc.ID, pod); err != nil {
		return refuse(ErrReplayLedger, ReasonReplayed, "allocation %s of pod %s/%s: %w", alloc.ID, pod.GetNamespace(), pod.GetName(), err)
	}
	return nil
}

// checkPreparedClaims is Prepared claims: the LPUs of the claims when
// lpu-dra prepared every one of them for the pod (awaitClaimLPUs).
func (v *Verifier) checkPreparedClaims(pod *api.PodSandbox, claims []string) ([]string, error) {
	ids, err := v.awaitClaimLPUs(pod, claims)
	if err != nil {
		return nil, refuse(ErrPreparedClaims, ReasonBadValue, "lpu-dra claim device: %w", err)
	}
	return ids, nil
}

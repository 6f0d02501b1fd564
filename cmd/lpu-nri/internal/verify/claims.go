package verify

import (
	"errors"
	"fmt"
	"time"

	"github.com/containerd/nri/pkg/api"

	"github.com/hyperaccel/lpu-node/internal/dracheckpoint"
	"github.com/hyperaccel/lpu-node/pkg/inject"
)

// DefaultClaimWait is how long CreateContainer waits, at most, for lpu-dra
// to record a pod that joined a prepared claim. The kubelet does not
// announce such a pod to the driver; lpu-dra learns of it from its pod
// watch, normally long before the pod's first container, so the wait only
// covers a race. It stays well under the runtimes' NRI request timeout
// (2 s by default), and a pod still missing after it is refused: the
// kubelet retries the container with backoff.
const DefaultClaimWait = time.Second

// claimPoll is how often the checkpoint is re-read while waiting.
const claimPoll = 50 * time.Millisecond

func claimWait(d time.Duration) time.Duration {
	switch {
	case d == 0:
		return DefaultClaimWait
	case d < 0:
		return 0
	}
	return d
}

// awaitClaimLPUs is claimLPUs for CreateContainer: a claim that is
// prepared but not reserved for the pod yet (dracheckpoint.ErrNotReserved)
// is re-read until claimWait passes, then refused. Any other answer is
// final at once; so is every answer outside CreateContainer (the audit
// reads the checkpoint as it is).
func (v *Verifier) awaitClaimLPUs(pod *api.PodSandbox, claims []string) ([]string, error) {
	deadline := time.Now().Add(v.claimWait)
	for tries := 1; ; tries++ {
		ids, err := v.claimLPUs(pod, claims)
		if err == nil && tries > 1 {
			v.log.Info("lpu-dra recorded the pod in its claims while CreateContainer waited",
				"namespace", pod.GetNamespace(), "pod", pod.GetName(), "uid", pod.GetUid(), "reads", tries)
		}
		if err == nil || !errors.Is(err, dracheckpoint.ErrNotReserved) || !time.Now().Add(claimPoll).Before(deadline) {
			return ids, err
		}
		time.Sleep(claimPoll)
	}
}

// (nodes, mounts, LPU_VISIBLE_DEVICES), so nothing is added once lpu-dra's
// checkpoint says the claims were prepared for this pod; their LPUs are
// then the container's verified allocation, under the same rules as a
// sealed one: known and healthy, and no LPU node carried beyond them.
func (v *Verifier) decideClaims(pod *api.PodSandbox, ctr *api.Container, claims []string) error {
	ids, err := v.awaitClaimLPUs(pod, claims)
	if err != nil {
		return refuse(ReasonBadValue, "lpu-dra claim device: %w", err)
	}
	snap := v.store.Load()
	if !snap.Ready() {
		return refuse(ReasonNoInventory, "no LPU inventory yet (%v); cannot verify claim LPUs %s", snap.Err, inject.EncodeIDs(ids))
	}
	for _, id := range ids {
		d, ok := snap.Device(id)
		if !ok {
			v.store.Kick()
			return refuse(ReasonUnknownDevice, "claimed device %q is not on this node (known: %d LPUs)", id, len(snap.Inventory.Devices))
		}
		if !d.Health.Healthy {
			return refuse(ReasonUnhealthyDevice, "claimed device %s is unhealthy: %s", id, d.Health.Reason)
		}
	}
	return v.checkCarried(snap, pod, ctr, ids)
}

// claimLPUs returns the LPUs of the claims when lpu-dra prepared every one
// of them for the pod, else why not.
func (v *Verifier) claimLPUs(pod *api.PodSandbox, claims []string) ([]string, error) {
	if v.claims == nil {
		return nil, fmt.Errorf("container has lpu-dra claim devices %v but this lpu-nri cannot verify claims", claims)
	}
	return v.claims(pod.GetUid(), claims)
}

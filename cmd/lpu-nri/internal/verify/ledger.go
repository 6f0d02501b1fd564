package verify

import (
	"errors"

	"github.com/containerd/nri/pkg/api"

	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/ledger"
)

// claimAllocation records the allocation ID for the pod in the ledger
// (which also marks the pod's sandbox running). A pod or namespace past its share
// (ledger.ErrShare) or a full ledger (ledger.ErrFull, nothing evictable)
// is logged with the namespaces and pods holding the most; the error
// wraps either, so the adapter counts them, and Decide refuses the
// container either way (fail closed).
func (v *Verifier) claimAllocation(id string, pod *api.PodSandbox) error {
	err := v.ledger.Claim(id, ledger.Holder{Namespace: pod.GetNamespace(), Pod: pod.GetUid(), Sandbox: pod.GetId()})
	switch {
	case errors.Is(err, ledger.ErrShare):
		v.log.Error("pod or namespace holds its whole share of the allocation ledger; refusing a new allocation ID",
			"pod", pod.GetNamespace()+"/"+pod.GetName(), "uid", pod.GetUid(), "allocation", id, "err", err)
	case errors.Is(err, ledger.ErrFull):
		nss, pods := v.ledger.Holders(5)
		v.log.Error("allocation ledger full of running pods' IDs; refusing a new allocation ID",
			"path", v.ledger.Path(), "entries", v.ledger.Len(), "allocation", id,
			"pod", pod.GetNamespace()+"/"+pod.GetName(), "topNamespaces", nss, "topPods", pods)
	}
	return err
}

package plugin

import (
	"errors"

	"github.com/containerd/nri/pkg/api"

	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/ledger"
)

// claimAllocation records the allocation ID for the pod in the ledger
// (which also marks the pod live). A full ledger, every ID a running
// pod's, is counted in lpu_nri_ledger_full_total; the caller refuses the
// container either way (fail closed).
func (p *Plugin) claimAllocation(id, podUID string) error {
	err := p.ledger.Claim(id, podUID)
	if errors.Is(err, ledger.ErrFull) {
		p.m.LedgerFull.Inc()
		p.log.Error("allocation ledger full of running pods' IDs; refusing a new allocation ID",
			"path", p.ledger.Path(), "entries", p.ledger.Len(), "allocation", id)
	}
	return err
}

// ledgerPodGone tells the ledger that pod's sandbox was removed: its IDs
// may be evicted from now on. (Synchronize replaces the whole live set
// through pruneLedger, which corrects a missed removal at the next
// connection.)
func (p *Plugin) ledgerPodGone(pod *api.PodSandbox) {
	if p.ledger != nil {
		p.ledger.PodGone(pod.GetUid())
	}
}

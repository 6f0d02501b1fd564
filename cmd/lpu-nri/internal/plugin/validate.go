package plugin

import (
	"context"
	"errors"

	"github.com/containerd/nri/pkg/api"

	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/verify"
)

// ValidateContainerAdjustment is lpu-nri's NRI validator (NRI >= 0.10,
// containerd >= 2.2): with the pristine container and the merged
// adjustment of every plugin, the container's final set of LPU device
// nodes, by device number, must equal its verified allocation (the sealed
// annotation or, on DRA nodes, the claims lpu-dra prepared for the pod). It
// catches a CreateContainer of lpu-nri that the runtime timed out or lost
// (the container would start without its LPUs), LPU nodes removed by a
// later plugin, and LPU nodes added by another plugin, by CDI or already in
// the container.
func (p *Plugin) ValidateContainerAdjustment(_ context.Context, req *api.ValidateContainerAdjustmentRequest) error {
	err := p.verifier.Validate(req.GetPod(), req.GetContainer(), req.GetAdjust())
	if err != nil {
		var r *verify.Refusal
		reason := verify.ReasonMismatch
		if errors.As(err, &r) {
			reason = r.Reason
		}
		p.m.Refusals.WithLabelValues(reason).Inc()
		p.log.Error("validation refused container", "namespace", req.GetPod().GetNamespace(), "pod", req.GetPod().GetName(),
			"container", req.GetContainer().GetName(), "reason", reason, "err", err)
	}
	return err
}

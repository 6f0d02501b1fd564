package driver

import (
	"context"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	resourceapply "k8s.io/client-go/applyconfigurations/resource/v1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/hyperaccel/lpu-node/cmd/lpu-dra/internal/statuswriter"
)

// WithStatus returns the driver as the kubelet plugin helper should serve
// it: each successful Prepare queues the claim's status.devices entries on
// w, each successful Unprepare queues their removal. A nil w returns d.
func (d *Driver) WithStatus(w *statuswriter.Writer) kubeletplugin.DRAPlugin {
	if w == nil {
		return d
	}
	return &statusPlugin{Driver: d, w: w}
}

// statusQueue takes a claim's wanted status.devices entries, nil to clear
// them: *statuswriter.Writer.
type statusQueue interface {
	Queue(namespace, name string, uid types.UID, devices []*resourceapply.AllocatedDeviceStatusApplyConfiguration)
}

// statusPlugin is the driver reporting claim status (HandleError is the
// driver's).
type statusPlugin struct {
	*Driver
	w statusQueue
}

// PrepareResourceClaims prepares, then queues the status of each claim
// prepared with devices of this driver.
func (p *statusPlugin) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	res, err := p.Driver.PrepareResourceClaims(ctx, claims)
	if err != nil {
		return res, err
	}
	snap, _ := p.devices.Snapshot()
	for _, claim := range claims {
		r, ok := res[claim.UID]
		if !ok || r.Err != nil || len(r.Devices) == 0 || claim.Status.Allocation == nil {
			continue
		}
		ours, _, err := p.ourDevices(claim)
		if err != nil {
			continue
		}
		if entries := statuswriter.Entries(snap, ours, p.log); len(entries) > 0 {
			p.w.Queue(claim.Namespace, claim.Name, claim.UID, entries)
		}
	}
	return res, nil
}

// UnprepareResourceClaims unprepares, then queues the removal of this
// driver's entries of each claim unprepared: the status says what the
// node has prepared, and the claim may stay allocated for a while (or, a
// named claim, be prepared again later).
func (p *statusPlugin) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	res, err := p.Driver.UnprepareResourceClaims(ctx, claims)
	if err != nil {
		return res, err
	}
	for _, c := range claims {
		if e, ok := res[c.UID]; ok && e == nil {
			p.w.Queue(c.Namespace, c.Name, c.UID, nil)
		}
	}
	return res, nil
}

// ReportPrepared queues the status of every claim in the checkpoint, so
// that updates lost to an API server outage or a restart converge when
// lpu-dra starts. An unchanged status is a no-op on the API server.
func (d *Driver) ReportPrepared(w *statuswriter.Writer) {
	if w == nil {
		return
	}
	snap, _ := d.devices.Snapshot()
	for uid, c := range d.Prepared() {
		if entries := statuswriter.Entries(snap, c.Devices, d.log); len(entries) > 0 {
			w.Queue(c.Namespace, c.Name, types.UID(uid), entries)
		}
	}
}

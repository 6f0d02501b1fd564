package plugin

import (
	"context"
	"time"

	"github.com/containerd/nri/pkg/api"
)

// StartContainer refuses to start a container whose pod's allocation
// claim is not on disk yet (ledgerDurable), and records the started
// container (with its final devices) for the periodic audit.
func (p *Plugin) StartContainer(ctx context.Context, pod *api.PodSandbox, c *api.Container) error {
	if err := p.ledgerDurable(ctx, pod); err != nil {
		return err
	}
	p.audit.Add(pod, c)
	return nil
}

// StopContainer drops the container from the audit's view and marks its
// allocation ID idle in the ledger.
func (p *Plugin) StopContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) ([]*api.ContainerUpdate, error) {
	p.audit.RemoveContainer(c.GetId())
	p.ledgerIdle(c)
	return nil, nil
}

// StopPodSandbox tells the ledger the sandbox stopped: it never runs a
// container again (the kubelet makes a new one).
func (p *Plugin) StopPodSandbox(_ context.Context, pod *api.PodSandbox) error {
	p.ledgerStopped(pod)
	return nil
}

// RemoveContainer drops the container from the audit's view.
func (p *Plugin) RemoveContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) error {
	p.audit.RemoveContainer(c.GetId())
	return nil
}

// RemovePodSandbox drops the pod and its containers from the audit's view
// and tells the ledger the sandbox is gone.
func (p *Plugin) RemovePodSandbox(_ context.Context, pod *api.PodSandbox) error {
	p.audit.RemovePod(pod.GetId())
	p.ledgerRemoved(pod)
	return nil
}

// AuditNow audits the current view once (what RunAudit does each tick).
func (p *Plugin) AuditNow() (holders, uninjected int) {
	if !p.Connected() {
		return 0, 0 // the view is stale until the next Synchronize
	}
	return p.audit.Now()
}

// RunAudit audits every interval until ctx ends (security.auditInterval).
func (p *Plugin) RunAudit(ctx context.Context, interval time.Duration) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			p.AuditNow()
		}
	}
}

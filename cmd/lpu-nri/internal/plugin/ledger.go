package plugin

import (
	"context"
	"fmt"
	"time"

	"github.com/containerd/nri/pkg/api"

	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/ledger"
)

// ledgerStopped tells the ledger that pod's sandbox stopped: it runs no
// container again (a new sandbox of the pod claims its IDs anew), so they
// may be evicted from now on unless another sandbox of the pod runs. The
// ledger keeps the stop across restarts: the runtime lists the stopped
// sandbox at every Synchronize until the pod is deleted.
func (p *Plugin) ledgerStopped(pod *api.PodSandbox) {
	if p.ledger != nil {
		p.ledger.Stopped(pod.GetUid(), pod.GetId())
	}
}

// ledgerRemoved tells the ledger that pod's sandbox was removed.
func (p *Plugin) ledgerRemoved(pod *api.PodSandbox) {
	if p.ledger != nil {
		p.ledger.Removed(pod.GetUid(), pod.GetId())
	}
}

// ledgerIdle tells the ledger that c, which presented an allocation ID,
// stopped (ledger.Idle).
func (p *Plugin) ledgerIdle(c *api.Container) {
	if p.ledger == nil {
		return
	}
	if a, err := p.key.OpenAllocation(c.GetAnnotations()); err == nil && a.ID != "" {
		p.ledger.Idle(a.ID)
	}
}

// ledgerSyncTimeout bounds StartContainer's wait for the pod's ledger
// record to reach the disk: well under the runtime's plugin timeout (2 s),
// past which the runtime would drop lpu-nri and start the container
// anyway; refusing first keeps it from running.
const ledgerSyncTimeout = time.Second

// ledgerDurable returns once the ledger records of pod's allocation IDs
// are on disk (at once for a pod without new ones). CreateContainer's
// claim returns when the record is written, not synced (that keeps it
// well under 1 ms); the sync runs while the runtime creates the container
// and is waited for here, before the container can run.
func (p *Plugin) ledgerDurable(ctx context.Context, pod *api.PodSandbox) error {
	if p.ledger == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, ledgerSyncTimeout)
	defer cancel()
	if err := p.ledger.SyncPod(ctx, pod.GetUid()); err != nil {
		p.log.Error("allocation ledger record not on disk; refusing to start the container",
			"pod", pod.GetNamespace()+"/"+pod.GetName(), "uid", pod.GetUid(), "err", err)
		return fmt.Errorf("lpu-nri: allocation ledger: %v", err)
	}
	return nil
}

// seedLedger records the allocation IDs of the running containers for
// their pods, so a lost ledger file cannot let another pod claim them.
func (p *Plugin) seedLedger(pods []*api.PodSandbox, ctrs []*api.Container) {
	if p.ledger == nil {
		return
	}
	uid := make(map[string]string, len(pods))
	ns := make(map[string]string, len(pods))
	for _, pod := range pods {
		uid[pod.GetId()], ns[pod.GetId()] = pod.GetUid(), pod.GetNamespace()
	}
	running := map[string]ledger.Holder{}
	for _, c := range ctrs {
		if c.GetState() == api.ContainerState_CONTAINER_STOPPED {
			continue
		}
		if a, err := p.key.OpenAllocation(c.GetAnnotations()); err == nil && a.ID != "" {
			running[a.ID] = ledger.Holder{Namespace: ns[c.GetPodSandboxId()], Pod: uid[c.GetPodSandboxId()], Sandbox: c.GetPodSandboxId()}
		}
	}
	conflicts, err := p.ledger.Seed(running)
	if err != nil {
		p.log.Error("record running allocations", "path", p.ledger.Path(), "err", err)
	}
	if len(conflicts) > 0 {
		p.log.Error("running containers hold allocation IDs first used by other pods", "allocations", conflicts)
	}
}

// pruneLedger gives the ledger the runtime's sandboxes (a pod is live
// while one of its sandboxes runs: one that runs a container, or that
// the ledger did not see stop), which forgets allocation IDs of pods gone
// for ledger.Retention, and marks the IDs of stopped containers idle.
func (p *Plugin) pruneLedger(pods []*api.PodSandbox, ctrs []*api.Container) {
	if p.ledger == nil {
		return
	}
	active := make(map[string]bool, len(ctrs))
	for _, c := range ctrs {
		if c.GetState() != api.ContainerState_CONTAINER_STOPPED {
			active[c.GetPodSandboxId()] = true
		}
	}
	sandboxes := make([]ledger.Sandbox, 0, len(pods))
	for _, pod := range pods {
		sandboxes = append(sandboxes, ledger.Sandbox{ID: pod.GetId(), Pod: pod.GetUid(), Active: active[pod.GetId()]})
	}
	if err := p.ledger.Prune(sandboxes); err != nil {
		p.log.Error("prune allocation ledger", "path", p.ledger.Path(), "err", err)
	}
	for _, c := range ctrs {
		if c.GetState() == api.ContainerState_CONTAINER_STOPPED {
			p.ledgerIdle(c)
		}
	}
}

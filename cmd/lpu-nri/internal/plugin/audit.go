package plugin

import (
	"context"
	"sync"
	"time"

	"github.com/containerd/nri/pkg/api"

	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/metrics"
)

// tracker is the periodic audit's view of the runtime: the running
// containers and their pods, taken at Synchronize and kept current by the
// lifecycle events. It also remembers which containers an audit already
// reported, so the counters count containers, not audit passes.
type tracker struct {
	mu         sync.Mutex
	pods       map[string]*api.PodSandbox
	ctrs       map[string]*api.Container
	holders    map[string]bool
	uninjected map[string]bool
}

func (t *tracker) init() {
	t.pods, t.ctrs = map[string]*api.PodSandbox{}, map[string]*api.Container{}
	t.holders, t.uninjected = map[string]bool{}, map[string]bool{}
}

// reset replaces the view with what Synchronize reported.
func (t *tracker) reset(pods []*api.PodSandbox, ctrs []*api.Container) {
	t.mu.Lock()
	defer t.mu.Unlock()
	clear(t.pods)
	clear(t.ctrs)
	for _, p := range pods {
		t.pods[p.GetId()] = p
	}
	for _, c := range ctrs {
		if c.GetState() != api.ContainerState_CONTAINER_STOPPED {
			t.ctrs[c.GetId()] = c
		}
	}
}

func (t *tracker) add(pod *api.PodSandbox, c *api.Container) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.pods[pod.GetId()] = pod
	t.ctrs[c.GetId()] = c
}

func (t *tracker) removeContainer(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.ctrs, id)
}

func (t *tracker) removePod(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.pods, id)
	for cid, c := range t.ctrs {
		if c.GetPodSandboxId() == id {
			delete(t.ctrs, cid)
		}
	}
}

// view returns copies of the slices (the containers themselves are
// never modified).
func (t *tracker) view() ([]*api.PodSandbox, []*api.Container) {
	t.mu.Lock()
	defer t.mu.Unlock()
	pods := make([]*api.PodSandbox, 0, len(t.pods))
	for _, p := range t.pods {
		pods = append(pods, p)
	}
	ctrs := make([]*api.Container, 0, len(t.ctrs))
	for _, c := range t.ctrs {
		ctrs = append(ctrs, c)
	}
	return pods, ctrs
}

// record sets the gauges to the current counts and counts the containers
// not reported before.
func (t *tracker) record(m *metrics.Metrics, holders, uninjected []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	m.Unallocated.Set(float64(len(holders)))
	m.Uninjected.Set(float64(len(uninjected)))
	t.holders = mark(t.holders, holders, m.UnallocatedFound.Inc)
	t.uninjected = mark(t.uninjected, uninjected, m.UninjectedFound.Inc)
}

// reported reports whether the last audit already found container id (as
// a holder, or as an uninjected allocation).
func (t *tracker) reported(holder bool, id string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if holder {
		return t.holders[id]
	}
	return t.uninjected[id]
}

// mark returns the set of ids, calling inc for each not in seen.
func mark(seen map[string]bool, ids []string, inc func()) map[string]bool {
	next := make(map[string]bool, len(ids))
	for _, id := range ids {
		if !seen[id] {
			inc()
		}
		next[id] = true
	}
	return next
}

// StartContainer refuses to start a container whose pod's allocation
// claim is not on disk yet (ledgerDurable), and records the started
// container (with its final devices) for the periodic audit.
func (p *Plugin) StartContainer(ctx context.Context, pod *api.PodSandbox, c *api.Container) error {
	if err := p.ledgerDurable(ctx, pod); err != nil {
		return err
	}
	p.audit.add(pod, c)
	return nil
}

// StopContainer drops the container from the audit's view and marks its
// allocation ID idle in the ledger.
func (p *Plugin) StopContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) ([]*api.ContainerUpdate, error) {
	p.audit.removeContainer(c.GetId())
	p.ledgerIdle(c)
	return nil, nil
}

// StopPodSandbox tells the ledger the pod is no longer live: a stopped
// sandbox never runs a container again (the kubelet makes a new one).
func (p *Plugin) StopPodSandbox(_ context.Context, pod *api.PodSandbox) error {
	p.ledgerPodGone(pod)
	return nil
}

// RemoveContainer drops the container from the audit's view.
func (p *Plugin) RemoveContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) error {
	p.audit.removeContainer(c.GetId())
	return nil
}

// RemovePodSandbox drops the pod and its containers from the audit's view
// and tells the ledger the pod is no longer live.
func (p *Plugin) RemovePodSandbox(_ context.Context, pod *api.PodSandbox) error {
	p.audit.removePod(pod.GetId())
	p.ledgerPodGone(pod)
	return nil
}

// AuditNow audits the current view once (what RunAudit does each tick).
func (p *Plugin) AuditNow() (holders, uninjected int) {
	if !p.Connected() {
		return 0, 0 // the view is stale until the next Synchronize
	}
	pods, ctrs := p.audit.view()
	return p.AuditCounts(pods, ctrs)
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

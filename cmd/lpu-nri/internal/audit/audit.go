// Package audit is lpu-nri's periodic audit: it keeps a view of the
// containers the runtime runs (taken at Synchronize, kept current by the
// lifecycle events) and, at each pass, judges every running container with
// the trust rules' Audit (cmd/lpu-nri/internal/verify), logs each finding
// once and exports the counts (lpu_nri_unallocated_holders,
// lpu_nri_uninjected_allocations and their _found_total counters).
package audit

import (
	"cmp"
	"log/slog"
	"sync"

	"github.com/containerd/nri/pkg/api"

	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/inventory"
	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/metrics"
	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/verify"
)

// Auditor audits the containers of one runtime connection.
type Auditor struct {
	v     *verify.Verifier
	store *inventory.Store
	m     *metrics.Metrics
	log   *slog.Logger
	t     tracker
}

// New returns an Auditor judging with v over store's inventory, exporting
// to m; a nil log discards.
func New(v *verify.Verifier, store *inventory.Store, m *metrics.Metrics, log *slog.Logger) *Auditor {
	a := &Auditor{v: v, store: store, m: m, log: cmp.Or(log, slog.New(slog.DiscardHandler))}
	a.t.init()
	return a
}

// Reset replaces the view with what Synchronize reported.
func (a *Auditor) Reset(pods []*api.PodSandbox, ctrs []*api.Container) { a.t.reset(pods, ctrs) }

// Add records a started container (with its final devices) and its pod.
func (a *Auditor) Add(pod *api.PodSandbox, c *api.Container) { a.t.add(pod, c) }

// RemoveContainer drops a stopped or removed container.
func (a *Auditor) RemoveContainer(id string) { a.t.removeContainer(id) }

// RemovePod drops a removed pod and its containers.
func (a *Auditor) RemovePod(id string) { a.t.removePod(id) }

// Now audits the current view once.
func (a *Auditor) Now() (holders, uninjected int) { return a.Counts(a.t.view()) }

// Counts checks every running container of ctrs against its allocation
// and returns two counts, each logged at error per container when first
// found and exported as a gauge (plus a counter of containers newly
// found):
//   - unallocated holders: containers holding LPU device nodes, or device
//     cgroup rules admitting LPUs, that no valid allocation of theirs
//     covers (lpu_nri_unallocated_holders);
//   - uninjected allocations: containers whose verified allocation names
//     LPUs whose nodes they do not hold, e.g. created while lpu-nri's
//     CreateContainer timed out (lpu_nri_uninjected_allocations).
func (a *Auditor) Counts(pods []*api.PodSandbox, ctrs []*api.Container) (holders, uninjected int) {
	snap := a.store.Load()
	if !snap.Ready() {
		return 0, 0
	}
	byID := make(map[string]*api.PodSandbox, len(pods))
	for _, pod := range pods {
		byID[pod.GetId()] = pod
	}
	var holderIDs, uninjectedIDs []string
	for _, c := range ctrs {
		if c.GetState() == api.ContainerState_CONTAINER_STOPPED {
			continue
		}
		pod := byID[c.GetPodSandboxId()]
		f := a.v.Audit(snap, pod, c)
		switch {
		case f.Unallocated != "":
			holderIDs = append(holderIDs, c.GetId())
			if !a.t.reported(true, c.GetId()) { // logged when first found; the gauge still counts it
				a.log.Error("container holds LPU device nodes without a valid allocation",
					"namespace", pod.GetNamespace(), "pod", pod.GetName(), "container", c.GetName(),
					"containerID", c.GetId(), "devices", f.Held, "why", f.Unallocated)
			}
		case f.Uninjected != "":
			uninjectedIDs = append(uninjectedIDs, c.GetId())
			if !a.t.reported(false, c.GetId()) {
				a.log.Error("container runs without the LPUs it was allocated",
					"namespace", pod.GetNamespace(), "pod", pod.GetName(), "container", c.GetName(),
					"containerID", c.GetId(), "why", f.Uninjected)
			}
		}
	}
	a.t.record(a.m, holderIDs, uninjectedIDs)
	return len(holderIDs), len(uninjectedIDs)
}

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

package plugin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/nri/pkg/api"
	oteltrace "go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/inventory"
	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/metrics"
	"github.com/hyperaccel/lpu-node/internal/startup"
	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/inject"
	"github.com/hyperaccel/lpu-node/pkg/trace"
)

// MaxCrossCheckTimeout caps the PodResources cross-check whatever the
// config says: the runtime gives a plugin 2s per request and then closes it
// and creates the container without it.
const MaxCrossCheckTimeout = time.Second

// CrossChecker confirms an allocation with an independent source (kubelet's
// PodResources API). Check returns nil when the kubelet agrees that the
// container holds exactly ids.
type CrossChecker interface {
	Check(ctx context.Context, namespace, pod, container string, ids []string) error
}

// Readiness receives the connection state (a *ready.Server in production).
type Readiness interface{ Set(connected bool) }

// Config holds the parts a Plugin works with.
type Config struct {
	Key     *inject.Key      // verifies the allocation seal; required
	Store   *inventory.Store // the node's LPUs; required
	Options inject.Options   // driver mounts and extra env
	// Check is the optional PodResources cross-check; nil disables it.
	Check        CrossChecker
	CheckTimeout time.Duration    // default and cap: MaxCrossCheckTimeout
	Metrics      *metrics.Metrics // default: a private metrics.New()
	Ready        Readiness        // optional
	Log          *slog.Logger     // nil discards
	// Tracer starts a CreateContainer span per request, linked to the
	// device plugin's Allocate span through the allocation ID; nil: no
	// tracing.
	Tracer oteltrace.Tracer
	// Claims verifies that lpu-dra prepared the named claims for the pod
	// (dracheckpoint.Verify on the state dir); nil refuses every container
	// with a claim's CDI device.
	Claims func(podUID string, claimUIDs []string) error
}

// Plugin is the NRI plugin. It implements the stub's Configure,
// Synchronize, CreateContainer and Shutdown handlers and nothing else.
type Plugin struct {
	key          *inject.Key
	store        *inventory.Store
	opts         inject.Options
	check        CrossChecker
	checkTimeout time.Duration
	m            *metrics.Metrics
	ready        Readiness
	log          *slog.Logger
	tracer       oteltrace.Tracer
	claims       func(podUID string, claimUIDs []string) error
	connMu       sync.Mutex
	synced       atomic.Bool
	syncs        atomic.Int64 // Synchronize calls, to tell a lost connection from a failed one
}

// New returns a Plugin from cfg.
func New(cfg Config) (*Plugin, error) {
	if cfg.Key == nil {
		return nil, errors.New("nri plugin: no seal key")
	}
	if cfg.Store == nil {
		return nil, errors.New("nri plugin: no inventory store")
	}
	p := &Plugin{key: cfg.Key, store: cfg.Store, opts: cfg.Options, check: cfg.Check,
		checkTimeout: cfg.CheckTimeout, m: cfg.Metrics, ready: cfg.Ready, log: cfg.Log, tracer: cfg.Tracer, claims: cfg.Claims}
	if p.tracer == nil {
		p.tracer = noop.NewTracerProvider().Tracer(trace.ScopeName)
	}
	if p.checkTimeout <= 0 || p.checkTimeout > MaxCrossCheckTimeout {
		p.checkTimeout = MaxCrossCheckTimeout
	}
	if p.m == nil {
		p.m = metrics.New()
	}
	p.log = startup.Logger(p.log)
	return p, nil
}

// Metrics returns the collectors the plugin updates.
func (p *Plugin) Metrics() *metrics.Metrics { return p.m }

// Connected reports whether the runtime has synchronized the plugin on the
// current connection.
func (p *Plugin) Connected() bool { return p.synced.Load() }

// setConnected records the connection state in readiness and metrics. The
// mutex keeps the readiness socket and the gauge in the order of the state
// changes when a close and a Synchronize race.
func (p *Plugin) setConnected(c bool) {
	p.connMu.Lock()
	defer p.connMu.Unlock()
	if p.synced.Swap(c) == c {
		return
	}
	if p.ready != nil {
		p.ready.Set(c)
	}
	if c {
		p.m.Connected.Set(1)
		p.m.Reconnects.Inc()
	} else {
		p.m.Connected.Set(0)
	}
}

// Configure is called by the runtime right after registration. The plugin
// subscribes to every event it implements (CreateContainer).
func (p *Plugin) Configure(_ context.Context, _, runtime, version string) (api.EventMask, error) {
	p.log.Info("configured by container runtime", "runtime", runtime, "runtimeVersion", version)
	return api.MustParseEventMask("CreateContainer"), nil
}

// Shutdown is called when the runtime shuts down cleanly.
func (p *Plugin) Shutdown(context.Context) {
	p.log.Info("container runtime shutting down")
	p.setConnected(false)
}

// Refusal is the error CreateContainer returns when it refuses a container:
// the runtime fails the creation and shows the message to the user.
type Refusal struct {
	Reason string // a metrics.Reason* value
	Err    error
}

func (r *Refusal) Error() string { return "lpu-nri refused the container: " + r.Err.Error() }

// Unwrap returns the cause.
func (r *Refusal) Unwrap() error { return r.Err }

func refuse(reason string, format string, args ...any) *Refusal {
	return &Refusal{Reason: reason, Err: fmt.Errorf(format, args...)}
}

// CreateContainer verifies the container's allocation and returns the
// adjustment that injects its LPUs, or a Refusal.
func (p *Plugin) CreateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	ctx, span := trace.StartCreateContainer(ctx, p.tracer, pod.GetName(), pod.GetNamespace(), ctr.GetName(), "")
	start := time.Now()
	adj, alloc, err := p.Decide(ctx, pod, ctr)
	p.m.CreateDuration.Observe(time.Since(start).Seconds())
	trace.LinkAllocation(span, alloc.ID)
	if len(alloc.IDs) > 0 {
		trace.RecordDevices(span, alloc.IDs)
	}
	trace.End(span, err)
	if err != nil {
		var r *Refusal
		reason := metrics.ReasonBadValue
		if errors.As(err, &r) {
			reason = r.Reason
		}
		p.m.Refusals.WithLabelValues(reason).Inc()
		p.log.Warn("refused container", "namespace", pod.GetNamespace(), "pod", pod.GetName(),
			"container", ctr.GetName(), "reason", reason, "err", err)
		return nil, nil, err
	}
	if len(alloc.IDs) > 0 {
		p.m.Injections.Inc()
		p.log.Info("injected LPUs", "namespace", pod.GetNamespace(), "pod", pod.GetName(),
			"container", ctr.GetName(), "ids", alloc.IDs, "allocation", alloc.ID)
	}
	return adj, nil, nil
}

// Decide applies the trust rules (package doc) in order and returns the
// adjustment with the verified allocation (IDs in ring order, and its
// allocation ID when the device plugin wrote one), an empty allocation for
// a container without one, or a *Refusal. Apart from the optional cross-check
// it does no I/O.
//
//  1. A reserved key in the pod annotations refuses the container: runtimes
//     copy pod annotations into containers, so a pod could claim LPUs.
//  2. An env setting LPU_VISIBLE_DEVICES more than once refuses the
//     container: the runtime's env adjustment replaces only the first copy
//     and then writes the last one over it, so the override would be lost.
//  3. The allocation is read from the container annotations only and its
//     seal verified; no allocation gives LPU_VISIBLE_DEVICES=none.
//  4. Every ID must be in the current inventory and healthy; nodes, majors
//     and minors come from discovery.
//  5. Optionally the kubelet's PodResources must report the same IDs.
func (p *Plugin) Decide(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, inject.Allocation, error) {
	var none inject.Allocation
	if key, ok := inject.HasReservedKey(pod.GetAnnotations()); ok {
		return nil, none, refuse(metrics.ReasonPodAnnotation,
			"pod annotation %q is reserved for the LPU device plugin; a pod cannot claim LPUs through annotations (runtimes copy pod annotations into containers): remove it from the pod", key)
	}
	if n := visibleDevicesCopies(ctr.GetEnv()); n > 1 {
		return nil, none, refuse(metrics.ReasonBadValue,
			"container env sets %s %d times (image and pod spec both set it?): the runtime would keep the last copy instead of the value lpu-nri sets, so set it at most once (lpu-nri overrides it anyway)",
			inject.EnvVisibleDevices, n)
	}
	if claims := claimUIDs(ctr.GetCDIDevices()); len(claims) > 0 {
		// LPUs from a DRA claim: the runtime already applied the claim's
		// CDI spec (nodes, mounts, LPU_VISIBLE_DEVICES); add nothing, once
		// lpu-dra's checkpoint says the claim was prepared for this pod.
		if p.claims == nil {
			return nil, none, refuse(metrics.ReasonBadValue, "container has lpu-dra claim devices %v but this lpu-nri cannot verify claims", claims)
		}
		if err := p.claims(pod.GetUid(), claims); err != nil {
			return nil, none, refuse(metrics.ReasonBadValue, "lpu-dra claim device: %w", err)
		}
		return nil, none, nil
	}
	alloc, err := p.key.OpenAllocation(ctr.GetAnnotations())
	ids := alloc.IDs
	switch {
	case errors.Is(err, inject.ErrNoAllocation):
		return inject.Unallocated().Adjustment(), none, nil
	case errors.Is(err, inject.ErrBadSeal):
		return nil, none, refuse(metrics.ReasonBadSeal, "allocation annotation not sealed by this node's device plugin: %w", err)
	case err != nil:
		return nil, none, refuse(metrics.ReasonBadValue, "allocation annotation invalid: %w", err)
	}
	snap := p.store.Load()
	if !snap.Ready() {
		return nil, none, refuse(metrics.ReasonNoInventory, "no LPU inventory yet (%v); cannot verify %s", snap.Err, inject.EncodeIDs(ids))
	}
	var buf [8]device.Device // a server's ring of 8 fits without a heap copy; more spill over
	devs := buf[:0]
	for _, id := range ids {
		d, ok := snap.Device(id)
		if !ok {
			p.store.Kick() // the inventory may be behind the device plugin's
			return nil, none, refuse(metrics.ReasonUnknownDevice, "allocated device %q is not on this node (known: %d LPUs)", id, len(snap.Inventory.Devices))
		}
		if !d.Health.Healthy {
			return nil, none, refuse(metrics.ReasonUnhealthyDevice, "allocated device %s is unhealthy: %s", id, d.Health.Reason)
		}
		devs = append(devs, *d)
	}
	if p.check != nil {
		cctx, cancel := context.WithTimeout(ctx, p.checkTimeout)
		err := p.check.Check(cctx, pod.GetNamespace(), pod.GetName(), ctr.GetName(), ids)
		cancel()
		if err != nil {
			return nil, none, refuse(metrics.ReasonPodResources, "kubelet pod resources check: %w", err)
		}
	}
	return inject.ForDevices(devs, snap.DriverVersion(), p.opts).Adjustment(), alloc, nil
}

// claimUIDs returns the claim UIDs of the container's lpu-dra CDI devices
// ("lpu.hyperaccel.ai/claim=<uid>").
func claimUIDs(devs []*api.CDIDevice) []string {
	var out []string
	for _, d := range devs {
		if uid, ok := strings.CutPrefix(d.GetName(), inject.ClaimKind+"="); ok {
			out = append(out, uid)
		}
	}
	return out
}

// visibleDevicesCopies counts the entries of env that set
// LPU_VISIBLE_DEVICES. containerd appends the image's and the pod spec's env
// without merging them, and NRI's env adjustment (v0.12) replaces only the
// first entry of a key and then rewrites it with each later one, so with
// two or more entries the container keeps the last of them, not lpu-nri's
// value. Names in another case or with spaces are other variables, and an
// entry without '=' is dropped by the runtime; neither counts.
func visibleDevicesCopies(env []string) int {
	n := 0
	for _, e := range env {
		if strings.HasPrefix(e, inject.EnvVisibleDevices+"=") {
			n++
		}
	}
	return n
}

// Synchronize audits the containers the runtime already runs: any container
// holding LPU device nodes without a valid allocation for them is logged and
// counted in lpu_nri_unallocated_holders. It then marks the plugin ready.
func (p *Plugin) Synchronize(_ context.Context, pods []*api.PodSandbox, ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	n := p.Audit(pods, ctrs)
	p.m.Unallocated.Set(float64(n))
	p.log.Info("synchronized with container runtime", "pods", len(pods), "containers", len(ctrs), "unallocatedHolders", n)
	p.syncs.Add(1)
	p.setConnected(true)
	return nil, nil
}

// Audit returns how many running containers hold LPU device nodes that no
// valid allocation of theirs covers, logging each at warn.
func (p *Plugin) Audit(pods []*api.PodSandbox, ctrs []*api.Container) int {
	snap := p.store.Load()
	byID := make(map[string]*api.PodSandbox, len(pods))
	for _, pod := range pods {
		byID[pod.GetId()] = pod
	}
	holders := 0
	for _, c := range ctrs {
		if c.GetState() == api.ContainerState_CONTAINER_STOPPED {
			continue
		}
		var held []*api.LinuxDevice
		for _, d := range c.GetLinux().GetDevices() {
			if snap.IsLPUNode(d.GetPath(), d.GetType(), d.GetMajor(), d.GetMinor()) {
				held = append(held, d)
			}
		}
		if len(held) == 0 {
			continue
		}
		pod := byID[c.GetPodSandboxId()]
		if claims := claimUIDs(c.GetCDIDevices()); len(claims) > 0 && p.claims != nil && p.claims(pod.GetUid(), claims) == nil {
			continue // LPUs from a claim lpu-dra prepared for this pod
		}
		why := p.coverage(snap, pod, c, held)
		if why == "" {
			continue
		}
		holders++
		paths := make([]string, len(held))
		for i, d := range held {
			paths[i] = d.GetPath()
		}
		p.log.Warn("container holds LPU device nodes without a valid allocation",
			"namespace", pod.GetNamespace(), "pod", pod.GetName(), "container", c.GetName(),
			"containerID", c.GetId(), "devices", paths, "why", why)
	}
	return holders
}

// coverage returns "" when the container's sealed allocation covers every
// held node, else why not. A node is judged by what it opens, its device
// number, not by its path: /dev/accel with lpu3's number is lpu3, and
// /dev/lpu3 with lpu5's number is lpu5. Only an allocated ID the inventory
// no longer knows falls back to its path. snap is the audit's one view of
// the inventory, the same it found the held nodes with.
func (p *Plugin) coverage(snap *inventory.Snapshot, pod *api.PodSandbox, c *api.Container, held []*api.LinuxDevice) string {
	if key, ok := inject.HasReservedKey(pod.GetAnnotations()); ok {
		return fmt.Sprintf("pod annotation %q", key)
	}
	alloc, err := p.key.OpenAllocation(c.GetAnnotations())
	if err != nil {
		return err.Error()
	}
	ids := alloc.IDs
	type number struct{ major, minor int64 }
	numbers := make(map[number]bool, len(ids))
	paths := make(map[string]bool)
	for _, id := range ids {
		if d, ok := snap.Device(id); ok {
			for _, n := range d.NodeList() {
				numbers[number{n.Major, n.Minor}] = true
			}
		} else {
			paths[device.DevDir+"/"+id] = true
		}
	}
	for _, h := range held {
		if !numbers[number{h.GetMajor(), h.GetMinor()}] && !paths[h.GetPath()] {
			return fmt.Sprintf("%s (%d:%d) is not in its allocation %s", h.GetPath(), h.GetMajor(), h.GetMinor(), inject.EncodeIDs(ids))
		}
	}
	return ""
}

package plugin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/nri/pkg/api"
	oteltrace "go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/guard"
	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/inventory"
	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/ledger"
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
	// Ledger records the first pod of each allocation ID and refuses the
	// ID from any other pod; nil disables the check (tests only).
	Ledger *ledger.Ledger
	// AcceptLegacySeals accepts v1 (not node-bound) seals: the
	// security.acceptLegacySeals migration switch.
	AcceptLegacySeals bool
	// AllowNamespaces may hold LPU nodes without an allocation
	// (security.allowNamespaces).
	AllowNamespaces []string
	// Claims verifies that lpu-dra prepared the named claims for the pod
	// and returns the LPUs they hold (dracheckpoint.PodLPUs on the state
	// dir): a claim container's verified allocation. nil refuses every
	// container with a claim's CDI device.
	Claims func(podUID string, claimUIDs []string) ([]string, error)
	// RuntimeGuard (security.runtimeGuard): a verified container whose
	// pristine spec lacks the guard's createRuntime hook is logged at warn
	// (the runtime has CDI off, or the device plugin runs without the
	// guard), so a guard that is silently absent is seen.
	RuntimeGuard bool
	// ClaimWait bounds how long CreateContainer re-reads the claims of a
	// pod lpu-dra has not recorded yet (claimWait); zero is
	// DefaultClaimWait, negative does not wait.
	ClaimWait time.Duration
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
	claims       func(podUID string, claimUIDs []string) ([]string, error)
	claimWait    time.Duration
	ledger       *ledger.Ledger
	acceptV1     bool
	allowNS      []string
	guard        bool
	audit        tracker
	connMu       sync.Mutex
	synced       atomic.Bool
	syncs        atomic.Int64                 // Synchronize calls, to tell a lost connection from a failed one
	nriConn      atomic.Pointer[net.UnixConn] // the current connection to the runtime, for Live
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
		checkTimeout: cfg.CheckTimeout, m: cfg.Metrics, ready: cfg.Ready, log: cfg.Log, tracer: cfg.Tracer,
		ledger: cfg.Ledger, acceptV1: cfg.AcceptLegacySeals, allowNS: cfg.AllowNamespaces, claims: cfg.Claims,
		claimWait: claimWait(cfg.ClaimWait), guard: cfg.RuntimeGuard}
	p.audit.init()
	if l, ok := p.ready.(liveSetter); ok {
		l.SetLive(p.Live) // readiness answers "connected" only on proof
	}
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

// Events are the NRI events the plugin subscribes to: CreateContainer to
// inject, and the container and pod lifecycle events that keep the periodic
// audit's view and the ledger's live set current. ValidatingEvents adds the validator.
const (
	Events           = "CreateContainer,StartContainer,StopContainer,RemoveContainer,StopPodSandbox,RemovePodSandbox"
	ValidatingEvents = Events + ",ValidateContainerAdjustment"
)

// Configure is called by the runtime right after registration. The plugin
// subscribes to ValidatingEvents when the runtime's NRI has validators, else
// to Events: an older runtime refuses a plugin that subscribes to an event
// it does not know.
func (p *Plugin) Configure(_ context.Context, _, runtime, version string) (api.EventMask, error) {
	validate := HasValidators(runtime, version)
	p.log.Info("configured by container runtime", "runtime", runtime, "runtimeVersion", version, "validator", validate)
	if validate {
		return api.MustParseEventMask(ValidatingEvents), nil
	}
	return api.MustParseEventMask(Events), nil
}

// HasValidators reports whether a runtime's NRI calls validator plugins
// (NRI >= 0.10): containerd >= 2.2, CRI-O >= 1.34. Other runtimes are
// assumed current (they embed the NRI library this plugin is built with).
func HasValidators(runtime, version string) bool {
	var min [2]int
	switch strings.ToLower(runtime) {
	case "containerd":
		min = [2]int{2, 2}
	case "cri-o", "crio":
		min = [2]int{1, 34}
	default:
		return true
	}
	v := strings.TrimPrefix(version, "v")
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return false
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(strings.TrimFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' }))
	if err1 != nil || err2 != nil {
		return false
	}
	return major > min[0] || (major == min[0] && minor >= min[1])
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
		// the runtime guard's proof (security.runtimeGuard): it reaches the
		// container only with the rest of this adjustment, so a container
		// the runtime created without lpu-nri does not start
		adj.AddAnnotation(inject.AnnotationVerified, p.key.VerifiedToken(ctr.GetId()))
		if p.guard && !hasGuardHook(ctr) {
			p.log.Warn("runtime guard: the container has no guard hook (is CDI on in the runtime, and security.runtimeGuard on in the device plugin?)",
				"namespace", pod.GetNamespace(), "pod", pod.GetName(), "container", ctr.GetName(), "device", inject.GuardDevice)
		}
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
//     seal verified: v2 (bound to this node, with an allocation ID), or v1
//     only behind the migration switch; no allocation gives
//     LPU_VISIBLE_DEVICES=none.
//  4. Every ID must be in the current inventory and healthy; nodes, majors
//     and minors come from discovery.
//  5. Optionally the kubelet's PodResources must report the same IDs.
//  6. LPU nodes the container already carries beyond its allocation
//     refuse it, outside security.allowNamespaces (checkCarried).
//  7. The allocation ID must be new or already this pod's (ledger): the
//     same sealed annotations copied into another pod are refused.
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
		return nil, none, p.decideClaims(pod, ctr, claims)
	}
	alloc, err := p.key.OpenAllocation(ctr.GetAnnotations())
	ids := alloc.IDs
	switch {
	case errors.Is(err, inject.ErrNoAllocation):
		adj := inject.Unallocated().Adjustment()
		if len(ctr.GetLinux().GetDevices()) == 0 && len(ctr.GetLinux().GetResources().GetDevices()) == 0 {
			return adj, none, nil
		}
		if err := p.checkCarried(p.store.Load(), pod, ctr, nil); err != nil {
			return nil, none, err
		}
		return adj, none, nil
	case errors.Is(err, inject.ErrBadSeal):
		return nil, none, refuse(metrics.ReasonBadSeal, "allocation annotation not sealed by this node's device plugin: %w", err)
	case err != nil:
		return nil, none, refuse(metrics.ReasonBadValue, "allocation annotation invalid: %w", err)
	case alloc.Version == inject.SealV1 && !p.acceptV1:
		return nil, none, refuse(metrics.ReasonLegacySeal,
			"allocation %s is sealed in the legacy v1 form (not bound to this node); recreate the pod so the device plugin seals it again, or set security.acceptLegacySeals: true during the upgrade", inject.EncodeIDs(ids))
	}
	snap := p.store.Load()
	if !snap.Ready() {
		return nil, none, refuse(metrics.ReasonNoInventory, "no LPU inventory yet (%v); cannot verify %s", snap.Err, inject.EncodeIDs(ids))
	}
	var buf [8]device.Device // a server's ring of 8 fits without a heap copy; more spill over
	devs, err := p.allocated(snap, ids, buf[:0])
	if err != nil {
		return nil, none, err
	}
	if err := p.checkHolder(ctx, snap, pod, ctr, alloc); err != nil {
		return nil, none, err
	}
	return inject.ForDevices(devs, snap.DriverVersion(), p.opts).Adjustment(), alloc, nil
}

// allocated appends the devices of ids to devs (step 4 of Decide): each
// must be in snap and healthy.
func (p *Plugin) allocated(snap *inventory.Snapshot, ids []string, devs []device.Device) ([]device.Device, error) {
	for _, id := range ids {
		d, ok := snap.Device(id)
		if !ok {
			p.store.Kick() // the inventory may be behind the device plugin's
			return nil, refuse(metrics.ReasonUnknownDevice, "allocated device %q is not on this node (known: %d LPUs)", id, len(snap.Inventory.Devices))
		}
		if !d.Health.Healthy {
			return nil, refuse(metrics.ReasonUnhealthyDevice, "allocated device %s is unhealthy: %s", id, d.Health.Reason)
		}
		devs = append(devs, *d)
	}
	return devs, nil
}

// checkHolder runs steps 5 to 7 of Decide for a verified allocation: the
// kubelet's PodResources, the nodes the container already carries, and
// the ledger.
func (p *Plugin) checkHolder(ctx context.Context, snap *inventory.Snapshot, pod *api.PodSandbox, ctr *api.Container, alloc inject.Allocation) error {
	ids := alloc.IDs
	if p.check != nil {
		cctx, cancel := context.WithTimeout(ctx, p.checkTimeout)
		err := p.check.Check(cctx, pod.GetNamespace(), pod.GetName(), ctr.GetName(), ids)
		cancel()
		if err != nil {
			return refuse(metrics.ReasonPodResources, "kubelet pod resources check: %w", err)
		}
	}
	if len(ctr.GetLinux().GetDevices()) > 0 || len(ctr.GetLinux().GetResources().GetDevices()) > 0 {
		if err := p.checkCarried(snap, pod, ctr, ids); err != nil {
			return err
		}
	}
	if p.ledger != nil && alloc.ID != "" {
		if err := p.claimAllocation(alloc.ID, pod); err != nil {
			return refuse(metrics.ReasonReplayed, "allocation %s of pod %s/%s: %w", alloc.ID, pod.GetNamespace(), pod.GetName(), err)
		}
	}
	return nil
}

// hasGuardHook reports whether the container's pristine spec holds the
// runtime guard's createRuntime hook (lpu-nri guard ...), which the
// runtime adds from the guard's CDI device.
func hasGuardHook(ctr *api.Container) bool {
	for _, h := range ctr.GetHooks().GetCreateRuntime() {
		if args := h.GetArgs(); len(args) > 1 && args[1] == guard.Command {
			return true
		}
	}
	return false
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

// decideClaims admits a container whose LPUs come from DRA claims, or
// returns a *Refusal. The runtime already applied the claims' CDI specs
// (nodes, mounts, LPU_VISIBLE_DEVICES), so nothing is added once lpu-dra's
// checkpoint says the claims were prepared for this pod; their LPUs are
// then the container's verified allocation, under the same rules as a
// sealed one: known and healthy, and no LPU node carried beyond them.
func (p *Plugin) decideClaims(pod *api.PodSandbox, ctr *api.Container, claims []string) error {
	ids, err := p.awaitClaimLPUs(pod, claims)
	if err != nil {
		return refuse(metrics.ReasonBadValue, "lpu-dra claim device: %w", err)
	}
	snap := p.store.Load()
	if !snap.Ready() {
		return refuse(metrics.ReasonNoInventory, "no LPU inventory yet (%v); cannot verify claim LPUs %s", snap.Err, inject.EncodeIDs(ids))
	}
	for _, id := range ids {
		d, ok := snap.Device(id)
		if !ok {
			p.store.Kick()
			return refuse(metrics.ReasonUnknownDevice, "claimed device %q is not on this node (known: %d LPUs)", id, len(snap.Inventory.Devices))
		}
		if !d.Health.Healthy {
			return refuse(metrics.ReasonUnhealthyDevice, "claimed device %s is unhealthy: %s", id, d.Health.Reason)
		}
	}
	return p.checkCarried(snap, pod, ctr, ids)
}

// claimLPUs returns the LPUs of the claims when lpu-dra prepared every one
// of them for the pod, else why not.
func (p *Plugin) claimLPUs(pod *api.PodSandbox, claims []string) ([]string, error) {
	if p.claims == nil {
		return nil, fmt.Errorf("container has lpu-dra claim devices %v but this lpu-nri cannot verify claims", claims)
	}
	return p.claims(pod.GetUid(), claims)
}

// checkCarried applies the validator's checks to what the container
// already has (runtimes without validators never ask): LPU nodes beyond
// ids (see foreignNodes), or device cgroup rules admitting LPUs beyond ids
// (see cgroupRefusal), refuse the container.
func (p *Plugin) checkCarried(snap *inventory.Snapshot, pod *api.PodSandbox, ctr *api.Container, ids []string) error {
	if !snap.Ready() {
		return nil // nothing is known to be an LPU; the validator refuses later
	}
	if err := p.foreignNodes(snap, pod, ctr, ids); err != nil {
		return err
	}
	return p.checkCgroup(snap, pod, ctr, ids)
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

// Synchronize audits the containers the runtime already runs (see
// AuditCounts), takes them as the periodic audit's view, and marks the
// plugin ready.
func (p *Plugin) Synchronize(_ context.Context, pods []*api.PodSandbox, ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	p.audit.reset(pods, ctrs)
	holders, uninjected := p.AuditCounts(pods, ctrs)
	p.log.Info("synchronized with container runtime", "pods", len(pods), "containers", len(ctrs),
		"unallocatedHolders", holders, "uninjectedAllocations", uninjected)
	p.seedLedger(pods, ctrs)
	p.pruneLedger(pods, ctrs)
	p.syncs.Add(1)
	p.setConnected(true)
	return nil, nil
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
			running[a.ID] = ledger.Holder{Namespace: ns[c.GetPodSandboxId()], Pod: uid[c.GetPodSandboxId()]}
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

// pruneLedger forgets allocation IDs of pods gone for ledger.Retention and
// marks the IDs of stopped containers idle.
func (p *Plugin) pruneLedger(pods []*api.PodSandbox, ctrs []*api.Container) {
	if p.ledger == nil {
		return
	}
	live := make(map[string]bool, len(pods))
	for _, pod := range pods {
		live[pod.GetUid()] = true
	}
	if err := p.ledger.Prune(live); err != nil {
		p.log.Error("prune allocation ledger", "path", p.ledger.Path(), "err", err)
	}
	for _, c := range ctrs {
		if c.GetState() == api.ContainerState_CONTAINER_STOPPED {
			p.ledgerIdle(c)
		}
	}
}

// Audit returns how many running containers hold LPU device nodes that no
// valid allocation of theirs covers (AuditCounts' first count).
func (p *Plugin) Audit(pods []*api.PodSandbox, ctrs []*api.Container) int {
	holders, _ := p.AuditCounts(pods, ctrs)
	return holders
}

// AuditCounts checks every running container against its allocation and
// returns two counts, each logged at error per container when first found
// and exported as a gauge (plus a counter of containers newly found):
//   - unallocated holders: containers holding LPU device nodes that no
//     valid allocation of theirs covers (lpu_nri_unallocated_holders);
//   - uninjected allocations: containers whose verified allocation names
//     LPUs whose nodes they do not hold, e.g. created while lpu-nri's
//     CreateContainer timed out (lpu_nri_uninjected_allocations).
//
// Containers in security.allowNamespaces may hold nodes they were not
// allocated.
func (p *Plugin) AuditCounts(pods []*api.PodSandbox, ctrs []*api.Container) (holders, uninjected int) {
	snap := p.store.Load()
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
		held := auditNodes(snap, c.GetLinux().GetDevices())
		if !p.allowed(pod.GetNamespace()) {
			if why := p.holderWhy(snap, pod, c, held); why != "" {
				holderIDs = append(holderIDs, c.GetId())
				paths := make([]string, len(held))
				for i, d := range held {
					paths[i] = d.path
				}
				if p.audit.reported(true, c.GetId()) {
					continue // logged when first found; the gauge still counts it
				}
				p.log.Error("container holds LPU device nodes without a valid allocation",
					"namespace", pod.GetNamespace(), "pod", pod.GetName(), "container", c.GetName(),
					"containerID", c.GetId(), "devices", paths, "why", why)
				continue
			}
		}
		ids := p.verified(snap, pod, c)
		if len(ids) == 0 {
			continue
		}
		var gbuf [16]inventory.DevNum
		if why := mismatch(snap, ids, want(snap, ids, gbuf[:0]), held, true); why != "" {
			uninjectedIDs = append(uninjectedIDs, c.GetId())
			if p.audit.reported(false, c.GetId()) {
				continue
			}
			p.log.Error("container runs without the LPUs it was allocated",
				"namespace", pod.GetNamespace(), "pod", pod.GetName(), "container", c.GetName(),
				"containerID", c.GetId(), "why", why)
		}
	}
	p.audit.record(p.m, holderIDs, uninjectedIDs)
	return len(holderIDs), len(uninjectedIDs)
}

// holderWhy returns why the container holds LPUs no valid allocation of
// its covers, "" when it does not: LPU nodes (coverage), or device cgroup
// rules admitting LPUs (cgroupCoverage).
func (p *Plugin) holderWhy(snap *inventory.Snapshot, pod *api.PodSandbox, c *api.Container, held []node) string {
	if len(held) > 0 {
		if why := p.coverage(snap, pod, c, held); why != "" {
			return why
		}
	}
	return p.cgroupCoverage(snap, pod, c)
}

// coverage returns "" when the container's verified allocation (sealed, or
// its DRA claims') covers every
// held node, else why not. A node is judged by what it opens, its device
// number, not by its path: /dev/accel with lpu3's number is lpu3, and
// /dev/lpu3 with lpu5's number is lpu5. Only an allocated ID the inventory
// no longer knows falls back to its path. snap is the audit's one view of
// the inventory, the same it found the held nodes with.
func (p *Plugin) coverage(snap *inventory.Snapshot, pod *api.PodSandbox, c *api.Container, held []node) string {
	if key, ok := inject.HasReservedKey(pod.GetAnnotations()); ok {
		return fmt.Sprintf("pod annotation %q", key)
	}
	var ids []string
	if claims := claimUIDs(c.GetCDIDevices()); len(claims) > 0 {
		var err error
		if ids, err = p.claimLPUs(pod, claims); err != nil {
			return err.Error()
		}
	} else {
		alloc, err := p.key.OpenAllocation(c.GetAnnotations())
		if err != nil {
			return err.Error()
		}
		if alloc.Version == inject.SealV1 && !p.acceptV1 {
			return "legacy v1 seal (security.acceptLegacySeals is off)"
		}
		ids = alloc.IDs
	}
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
		if !numbers[number{h.num.Major, h.num.Minor}] && !paths[h.path] {
			return fmt.Sprintf("%s (%d:%d) is not in its allocation %s", h.path, h.num.Major, h.num.Minor, inject.EncodeIDs(ids))
		}
	}
	return ""
}

// auditNodes returns the LPU nodes among devs for the audit: by device
// number, and also any /dev/lpuN path whatever its number (a node the
// inventory no longer knows is still reported).
func auditNodes(snap *inventory.Snapshot, devs []*api.LinuxDevice) []node {
	var held []node
	for _, d := range devs {
		n := inventory.DevNum{Major: d.GetMajor(), Minor: d.GetMinor()}
		if snap.IsLPUNode(d.GetPath(), d.GetType(), n.Major, n.Minor) {
			held = append(held, node{d.GetPath(), n})
		}
	}
	return held
}

package plugin

import (
	"cmp"
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

	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/audit"
	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/guard"
	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/ledger"
	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/metrics"
	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/verify"
	"github.com/hyperaccel/lpu-node/pkg/inject"
	"github.com/hyperaccel/lpu-node/pkg/trace"
)

// Readiness receives the connection state (a *ready.Server in production).
type Readiness interface{ Set(connected bool) }

// Config holds the parts a Plugin works with: the trust rules' parts
// (verify.Config; its Log is the plugin's too) and the adapter's.
type Config struct {
	verify.Config
	Metrics *metrics.Metrics // default: a private metrics.New()
	Ready   Readiness        // optional
	// Tracer starts a CreateContainer span per request, linked to the
	// device plugin's Allocate span through the allocation ID; nil: no
	// tracing.
	Tracer oteltrace.Tracer
	// RuntimeGuard (security.runtimeGuard): a verified container whose
	// pristine spec lacks the guard's createRuntime hook is logged at warn
	// (the runtime has CDI off, or the device plugin runs without the
	// guard), so a guard that is silently absent is seen.
	RuntimeGuard bool
}

// Plugin is the NRI plugin. It implements the stub's Configure,
// Synchronize, CreateContainer and Shutdown handlers and nothing else.
type Plugin struct {
	verifier *verify.Verifier
	key      *inject.Key
	m        *metrics.Metrics
	ready    Readiness
	log      *slog.Logger
	tracer   oteltrace.Tracer
	ledger   *ledger.Ledger
	guard    bool
	audit    *audit.Auditor
	connMu   sync.Mutex
	synced   atomic.Bool
	syncs    atomic.Int64                 // Synchronize calls, to tell a lost connection from a failed one
	nriConn  atomic.Pointer[net.UnixConn] // the current connection to the runtime, for Live
}

// New returns a Plugin from cfg.
func New(cfg Config) (*Plugin, error) {
	v, err := verify.New(cfg.Config)
	if err != nil {
		return nil, fmt.Errorf("nri plugin: %w", err)
	}
	p := &Plugin{verifier: v, key: cfg.Key, m: cfg.Metrics, ready: cfg.Ready, log: cmp.Or(cfg.Log, slog.New(slog.DiscardHandler)),
		tracer: cfg.Tracer, ledger: cfg.Ledger, guard: cfg.RuntimeGuard}
	if l, ok := p.ready.(liveSetter); ok {
		l.SetLive(p.Live) // readiness answers "connected" only on proof
	}
	if p.tracer == nil {
		p.tracer = noop.NewTracerProvider().Tracer(trace.ScopeName)
	}
	if p.m == nil {
		p.m = metrics.New()
	}
	p.audit = audit.New(v, cfg.Store, p.m, p.log)
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

// CreateContainer verifies the container's allocation and returns the
// adjustment that injects its LPUs, or a Refusal.
func (p *Plugin) CreateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	ctx, span := trace.StartCreateContainer(ctx, p.tracer, pod.GetName(), pod.GetNamespace(), ctr.GetName(), "")
	start := time.Now()
	adj, alloc, err := p.verifier.Decide(ctx, pod, ctr)
	p.m.CreateDuration.Observe(time.Since(start).Seconds())
	trace.LinkAllocation(span, alloc.ID)
	if len(alloc.IDs) > 0 {
		trace.RecordDevices(span, alloc.IDs)
	}
	trace.End(span, err)
	if err != nil {
		var r *verify.Refusal
		reason := verify.ReasonBadValue
		if errors.As(err, &r) {
			reason = r.Reason
		}
		p.m.Refusals.WithLabelValues(reason).Inc()
		switch {
		case errors.Is(err, ledger.ErrShare):
			p.m.LedgerShare.Inc()
		case errors.Is(err, ledger.ErrFull):
			p.m.LedgerFull.Inc()
		}
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

// Synchronize audits the containers the runtime already runs (see
// AuditCounts), takes them as the periodic audit's view, and marks the
// plugin ready.
func (p *Plugin) Synchronize(_ context.Context, pods []*api.PodSandbox, ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	p.audit.Reset(pods, ctrs)
	holders, uninjected := p.AuditCounts(pods, ctrs)
	p.log.Info("synchronized with container runtime", "pods", len(pods), "containers", len(ctrs),
		"unallocatedHolders", holders, "uninjectedAllocations", uninjected)
	p.seedLedger(pods, ctrs)
	p.pruneLedger(pods, ctrs)
	p.syncs.Add(1)
	p.setConnected(true)
	return nil, nil
}

// Audit returns how many running containers hold LPU device nodes that no
// valid allocation of theirs covers (AuditCounts' first count).
func (p *Plugin) Audit(pods []*api.PodSandbox, ctrs []*api.Container) int {
	holders, _ := p.AuditCounts(pods, ctrs)
	return holders
}

// AuditCounts audits pods and ctrs once (audit.Auditor.Counts).
func (p *Plugin) AuditCounts(pods []*api.PodSandbox, ctrs []*api.Container) (holders, uninjected int) {
	return p.audit.Counts(pods, ctrs)
}

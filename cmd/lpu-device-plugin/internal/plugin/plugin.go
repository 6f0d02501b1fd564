package plugin

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	oteltrace "go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/hyperaccel/lpu-node/config"
	"github.com/hyperaccel/lpu-node/internal/backoff"
	"github.com/hyperaccel/lpu-node/internal/health"
	"github.com/hyperaccel/lpu-node/pkg/alloc"
	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/inject"
	"github.com/hyperaccel/lpu-node/pkg/ready"
	"github.com/hyperaccel/lpu-node/pkg/trace"
)

// Results of one container's Allocate, the values of
// lpu_allocations_total{result}.
const (
	ResultContiguous    = "contiguous"
	ResultNonContiguous = "noncontiguous"
	ResultRefused       = "refused"
)

// RefusalMessage starts PreStartContainer's error when lpu-nri is not
// connected to the container runtime.
const RefusalMessage = "LPU injector not connected to the container runtime; refusing to start a container without its LPUs"

// CDIAnnotationDeviceID is the device part of the cdi.k8s.io/ annotation key
// returned in cdi mode; one container holds at most one allocation of the
// resource, so a fixed name is unique.
const CDIAnnotationDeviceID = "devices"

// DefaultPreStartTimeout is the PreStartTimeout of zero Options.
const DefaultPreStartTimeout = 2 * time.Second

// registerTimeout bounds one Register call to the kubelet.
const registerTimeout = 5 * time.Second

// Source gives the current devices; *health.Monitor implements it.
type Source interface {
	Snapshot() (health.Snapshot, <-chan struct{})
}

var _ Source = (*health.Monitor)(nil)

// Recorder receives the plugin's measurements; the metrics package
// implements it. Methods must be safe for concurrent use.
type Recorder interface {
	Allocation(result string)
	PreferredDuration(d time.Duration)
	AllocateDuration(d time.Duration)
	Registered()
}

type nopRecorder struct{}

func (nopRecorder) Allocation(string)               {}
func (nopRecorder) PreferredDuration(time.Duration) {}
func (nopRecorder) AllocateDuration(time.Duration)  {}
func (nopRecorder) Registered()                     {}

// Options configure a Plugin.
type Options struct {
	// ResourceName is the extended resource advertised, hyperaccel.ai/lpu.
	ResourceName string
	// KubeletDir holds kubelet.sock and the plugin's socket.
	KubeletDir string
	// StateDir holds the readiness socket lpu-nri serves (nri mode).
	StateDir string
	// Injection is config.InjectionNRI or config.InjectionCDI (resolved).
	Injection string
	// Policy is config.PolicyBestEffort or config.PolicyStrict.
	Policy string
	// Key seals the allocation annotation; required in nri mode.
	Key *inject.Key
	// RuntimeGuard (security.runtimeGuard, nri mode) adds the CDI device
	// inject.GuardDevice to every allocation: its hook keeps a container
	// lpu-nri did not verify from starting.
	RuntimeGuard bool
	// Recorder receives metrics; nil records nothing.
	Recorder Recorder
	// Tracer starts one Allocate span per container allocation (pkg/trace);
	// nil traces nothing.
	Tracer oteltrace.Tracer
	// Logger receives state changes; nil discards.
	Logger *slog.Logger
	// PreStartTimeout bounds the readiness check in PreStartContainer.
	PreStartTimeout time.Duration
	// Backoff bounds the wait between registration attempts while the
	// kubelet is absent or keeps dropping the plugin; zero fields take
	// backoff.Default.
	Backoff backoff.Steps
}

// Plugin is the kubelet device plugin for LPUs. It serves the v1beta1
// DevicePlugin service on <KubeletDir>/<device.PluginSocketName> and keeps
// itself registered (Run). It is stateless across Allocate calls: every answer
// derives from the request and the current device snapshot.
type Plugin struct {
	src    Source
	opts   Options
	log    *slog.Logger
	rec    Recorder
	socket string

	registered atomic.Bool
	streams    atomic.Int32

	readyMu   sync.Mutex
	lastReady *bool // last PreStart readiness verdict, for logging changes only
}

// New returns a plugin serving the devices of src.
func New(src Source, opts Options) (*Plugin, error) {
	if opts.ResourceName == "" || !strings.Contains(opts.ResourceName, "/") {
		return nil, fmt.Errorf("resource name %q: want domain/name", opts.ResourceName)
	}
	if opts.KubeletDir == "" {
		return nil, errors.New("kubelet directory: empty")
	}
	// The values of Injection and Policy were checked once, by
	// config.Validate and config.ResolveInjection.
	if opts.Injection == config.InjectionNRI && opts.Key == nil {
		return nil, errors.New("injection nri: no seal key")
	}
	opts.PreStartTimeout = cmp.Or(opts.PreStartTimeout, DefaultPreStartTimeout)
	opts.Backoff = opts.Backoff.OrDefault()
	p := &Plugin{src: src, opts: opts, log: cmp.Or(opts.Logger, slog.New(slog.DiscardHandler)), rec: opts.Recorder, socket: device.PluginSocketName(opts.ResourceName)}
	if p.rec == nil {
		p.rec = nopRecorder{}
	}
	if p.opts.Tracer == nil {
		p.opts.Tracer = noop.NewTracerProvider().Tracer(trace.ScopeName)
	}
	return p, nil
}

// Socket is the path of the plugin's socket.
func (p *Plugin) Socket() string { return path.Join(p.opts.KubeletDir, p.socket) }

// Registered reports whether the last registration with the kubelet
// succeeded and has not been invalidated since.
func (p *Plugin) Registered() bool { return p.registered.Load() }

// Streams is the number of open ListAndWatch streams.
func (p *Plugin) Streams() int { return int(p.streams.Load()) }

// options are the DevicePluginOptions sent at registration and returned by
// GetDevicePluginOptions.
func options() *pluginapi.DevicePluginOptions {
	return &pluginapi.DevicePluginOptions{PreStartRequired: true, GetPreferredAllocationAvailable: true}
}

// pluginDevices renders an inventory for ListAndWatch.
func pluginDevices(inv *device.Inventory) []*pluginapi.Device {
	out := make([]*pluginapi.Device, 0, len(inv.Devices))
	for _, d := range inv.Devices {
		pd := &pluginapi.Device{ID: d.ID, Health: pluginapi.Unhealthy}
		if d.Health.Healthy {
			pd.Health = pluginapi.Healthy
		}
		if d.NUMANode >= 0 {
			pd.Topology = &pluginapi.TopologyInfo{Nodes: []*pluginapi.NUMANode{{ID: int64(d.NUMANode)}}}
		}
		out = append(out, pd)
	}
	return out
}

func sameDevices(a, b []*pluginapi.Device) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].GetID() != b[i].GetID() || a[i].GetHealth() != b[i].GetHealth() ||
			numa(a[i]) != numa(b[i]) {
			return false
		}
	}
	return true
}

func numa(d *pluginapi.Device) int64 {
	if n := d.GetTopology().GetNodes(); len(n) > 0 {
		return n[0].GetID()
	}
	return -1
}

// service is the DevicePlugin service of one registration generation.
type service struct {
	pluginapi.UnimplementedDevicePluginServer
	p   *Plugin
	gen *generation
}

// GetDevicePluginOptions returns the plugin's options.
func (s *service) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return options(), nil
}

// ListAndWatch sends the device list, then a new one on every change, until
// the kubelet closes the stream or the generation stops. A stream the
// kubelet closes triggers re-registration.
func (s *service) ListAndWatch(_ *pluginapi.Empty, stream pluginapi.DevicePlugin_ListAndWatchServer) error {
	s.p.streams.Add(1)
	defer s.p.streams.Add(-1)
	var last []*pluginapi.Device
	sent := false
	for {
		snap, changed := s.p.src.Snapshot()
		devs := pluginDevices(snap.Inventory)
		if !sent || !sameDevices(last, devs) {
			if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: devs}); err != nil {
				if s.gen.ctx.Err() == nil {
					s.gen.trigger("ListAndWatch send failed: " + err.Error())
				}
				return err
			}
			last, sent = devs, true
		}
		select {
		case <-changed:
		case <-s.gen.ctx.Done():
			return nil
		case <-stream.Context().Done():
			if s.gen.ctx.Err() == nil {
				s.gen.trigger("ListAndWatch stream closed by kubelet")
			}
			return nil
		}
	}
}

// GetPreferredAllocation answers with ring-contiguous choices. It never
// returns an error: kubelet turns one into UnexpectedAdmissionError and pod
// admission storms. Without a good answer it returns the least fragmented
// set alloc finds, or none, and kubelet chooses by itself.
func (s *service) GetPreferredAllocation(_ context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	return s.p.preferred(req), nil
}

func (p *Plugin) preferred(req *pluginapi.PreferredAllocationRequest) (resp *pluginapi.PreferredAllocationResponse) {
	start := time.Now()
	resp = &pluginapi.PreferredAllocationResponse{}
	defer func() {
		if r := recover(); r != nil {
			p.log.Error("preferred allocation failed, answering nothing", "panic", fmt.Sprint(r))
			resp = &pluginapi.PreferredAllocationResponse{}
			for range req.GetContainerRequests() {
				resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{})
			}
		}
		p.rec.PreferredDuration(time.Since(start))
	}()
	snap, _ := p.src.Snapshot()
	for _, creq := range req.GetContainerRequests() {
		resp.ContainerResponses = append(resp.ContainerResponses,
			&pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: p.preferredOne(snap, creq)})
	}
	return resp
}

func (p *Plugin) preferredOne(snap health.Snapshot, creq *pluginapi.ContainerPreferredAllocationRequest) []string {
	size := int(creq.GetAllocationSize())
	must := creq.GetMustIncludeDeviceIDs()
	if snap.Layout == nil {
		p.log.Warn("no valid ring layout, no preferred allocation", "size", size)
		return nil
	}
	// Only devices that are healthy now: kubelet's view may lag ours.
	available := make([]string, 0, len(creq.GetAvailableDeviceIDs()))
	for _, id := range creq.GetAvailableDeviceIDs() {
		if d, ok := snap.Inventory.Device(id); ok && d.Health.Healthy {
			available = append(available, id)
		}
	}
	ids, contiguous := snap.Layout.PreferredArc(available, must, size)
	if len(ids) != size {
		p.log.Info("no preferred allocation, kubelet chooses", "size", size,
			"available", len(available), "mustInclude", must)
		return nil
	}
	if !contiguous {
		// Rare, so only here is Check run, for the reason it gives.
		pl, _ := snap.Layout.Check(ids)
		p.log.Info("no contiguous arc free, preferring the least fragmented set", "ids", ids, "reason", pl.Reason)
	}
	return ids
}

// Allocate re-checks each container's devices, which kubelet may have
// chosen against our preference, and answers according to the injection
// mode. Any refused container fails the whole call, naming the devices and
// why.
func (s *service) Allocate(ctx context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	return s.p.allocate(ctx, req)
}

func (p *Plugin) allocate(ctx context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	start := time.Now()
	defer func() { p.rec.AllocateDuration(time.Since(start)) }()
	snap, _ := p.src.Snapshot()
	resp := &pluginapi.AllocateResponse{ContainerResponses: make([]*pluginapi.ContainerAllocateResponse, 0, len(req.GetContainerRequests()))}
	results := make([]string, 0, len(req.GetContainerRequests()))
	for i, creq := range req.GetContainerRequests() {
		cresp, result, err := p.allocateOne(ctx, snap, creq.GetDevicesIds())
		if err != nil {
			p.rec.Allocation(ResultRefused)
			p.log.Warn("allocation refused", "ids", creq.GetDevicesIds(), "container", i, "err", err)
			return nil, status.Errorf(codes.FailedPrecondition, "allocate %s (container request %d): %v",
				p.opts.ResourceName, i, err)
		}
		resp.ContainerResponses = append(resp.ContainerResponses, cresp)
		results = append(results, result)
	}
	for _, r := range results {
		p.rec.Allocation(r)
	}
	return resp, nil
}

// allocateOne checks one container's device IDs and builds its response,
// inside one Allocate span.
func (p *Plugin) allocateOne(ctx context.Context, snap health.Snapshot, ids []string) (*pluginapi.ContainerAllocateResponse, string, error) {
	pl, err := p.check(snap, ids)
	if err != nil {
		_, span := trace.StartAllocate(ctx, p.opts.Tracer, p.opts.ResourceName, ids, -1, false, "")
		trace.End(span, err)
		return nil, "", err
	}
	// A fresh ID per container allocation ties lpu-nri's CreateContainer
	// span to this one; kubelet checkpoints the answer, so a replay after
	// a restart carries the same ID.
	allocID := inject.NewAllocationID()
	_, span := trace.StartAllocate(ctx, p.opts.Tracer, p.opts.ResourceName, pl.IDs, pl.Ring, pl.Contiguous, allocID)
	cresp, result, err := p.respond(pl, allocID)
	trace.End(span, err)
	return cresp, result, err
}

// check validates one container's device IDs and orders them along the
// ring: unknown, unhealthy or duplicate IDs are errors naming them, and so
// is a set that is not one arc under policy strict.
func (p *Plugin) check(snap health.Snapshot, ids []string) (alloc.Placement, error) {
	if len(ids) == 0 {
		return alloc.Placement{}, errors.New("no device IDs")
	}
	var unknown, unhealthy []string
	for _, id := range ids {
		d, ok := snap.Inventory.Device(id)
		switch {
		case !ok:
			unknown = append(unknown, strconv.Quote(id))
		case !d.Health.Healthy:
			unhealthy = append(unhealthy, fmt.Sprintf("%s (%s)", id, d.Health.Reason))
		}
	}
	var problems []string
	if len(unknown) > 0 {
		problems = append(problems, "unknown device IDs "+strings.Join(unknown, ","))
	}
	if len(unhealthy) > 0 {
		problems = append(problems, "unhealthy devices "+strings.Join(unhealthy, ", "))
	}
	if len(problems) > 0 {
		return alloc.Placement{}, fmt.Errorf("devices %s: %s", strings.Join(ids, ","), strings.Join(problems, "; "))
	}
	if snap.Layout == nil {
		return alloc.Placement{}, fmt.Errorf("devices %s: no valid ring layout on this node", strings.Join(ids, ","))
	}
	pl, err := snap.Layout.Check(ids)
	if err != nil {
		return alloc.Placement{}, fmt.Errorf("devices %s: %w", strings.Join(ids, ","), err)
	}
	if !pl.Contiguous && p.opts.Policy == config.PolicyStrict {
		return alloc.Placement{}, fmt.Errorf("devices %s are not one contiguous ring arc (%s); allocation policy strict refuses them",
			strings.Join(pl.IDs, ","), pl.Reason)
	}
	return pl, nil
}

// respond builds the answer for a checked placement in the injection mode.
func (p *Plugin) respond(pl alloc.Placement, allocID string) (*pluginapi.ContainerAllocateResponse, string, error) {
	result := ResultContiguous
	if !pl.Contiguous {
		result = ResultNonContiguous
		p.log.Info("accepting non-contiguous allocation (policy best-effort)", "ids", pl.IDs, "reason", pl.Reason)
	}
	if p.opts.Injection == config.InjectionNRI {
		// Only the sealed annotations: lpu-nri injects nodes, mounts and
		// env at CreateContainer, from its own discovery.
		ann, err := p.opts.Key.AnnotationsWithID(pl.IDs, allocID)
		if err != nil {
			return nil, "", fmt.Errorf("devices %s: %w", strings.Join(pl.IDs, ","), err)
		}
		resp := &pluginapi.ContainerAllocateResponse{Annotations: ann}
		if p.opts.RuntimeGuard {
			resp.CdiDevices = []*pluginapi.CDIDevice{{Name: inject.GuardDevice}}
		}
		return resp, result, nil
	}
	cresp, err := cdiResponse(pl.IDs)
	if err != nil {
		return nil, "", fmt.Errorf("devices %s: %w", strings.Join(pl.IDs, ","), err)
	}
	return cresp, result, nil
}

// cdiResponse names the devices for CDI: CDIDevices (kubelet ≥ 1.28), the
// cdi.k8s.io/ annotation older kubelets pass to the runtime, and the
// set-wide LPU_VISIBLE_DEVICES and NUM_LPU_DEVICES (per-device CDI env
// would replace each other). ids are in ring order.
func cdiResponse(ids []string) (*pluginapi.ContainerAllocateResponse, error) {
	names := inject.CDIDeviceNames(ids)
	value, err := cdi.AnnotationValue(names)
	if err != nil {
		return nil, fmt.Errorf("cdi annotation value: %w", err)
	}
	env, err := inject.AllocationEnv(ids)
	if err != nil {
		return nil, err
	}
	devs := make([]*pluginapi.CDIDevice, len(names))
	for i, name := range names {
		devs[i] = &pluginapi.CDIDevice{Name: name}
	}
	return &pluginapi.ContainerAllocateResponse{
		CdiDevices:  devs,
		Annotations: map[string]string{cdiAnnotationKey: value},
		Envs:        env,
	}, nil
}

// CDIAnnotationPluginName is the plugin part of the cdi.k8s.io/ annotation
// key: the CDI kind with '/' replaced, "hyperaccel.ai-lpu".
func CDIAnnotationPluginName() string { return strings.ReplaceAll(inject.CDIKind, "/", "-") }

// cdiAnnotationKey is the cdi.k8s.io/ annotation key of every cdi-mode
// answer; it depends only on constants, so it is built once.
var cdiAnnotationKey = func() string {
	key, err := cdi.AnnotationKey(CDIAnnotationPluginName(), CDIAnnotationDeviceID)
	if err != nil {
		panic("cdi annotation key: " + err.Error())
	}
	return key
}()

// PreStartContainer lets a container start only when its LPUs will be
// injected: in nri mode lpu-nri must report that it is connected to the
// runtime, otherwise the container would start without its devices. In cdi
// mode the runtime injects from the spec and there is nothing to check.
func (s *service) PreStartContainer(ctx context.Context, req *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return s.p.preStart(ctx, req)
}

func (p *Plugin) preStart(ctx context.Context, req *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	if p.opts.Injection != config.InjectionNRI {
		return &pluginapi.PreStartContainerResponse{}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, p.opts.PreStartTimeout)
	defer cancel()
	err := ready.Check(ctx, ready.Path(p.opts.StateDir))
	p.noteReady(err, req.GetDevicesIds())
	if err != nil {
		detail := strings.TrimPrefix(strings.TrimPrefix(err.Error(), ready.ErrNotConnected.Error()), ": ")
		if detail == "" {
			detail = "lpu-nri reports it is not connected"
		}
		return nil, status.Errorf(codes.Unavailable, "%s: %s (devices %s)", RefusalMessage, detail, strings.Join(req.GetDevicesIds(), ","))
	}
	return &pluginapi.PreStartContainerResponse{}, nil
}

// noteReady logs readiness only when it changes.
func (p *Plugin) noteReady(err error, ids []string) {
	ok := err == nil
	p.readyMu.Lock()
	defer p.readyMu.Unlock()
	if p.lastReady != nil && *p.lastReady == ok {
		return
	}
	p.lastReady = &ok
	if ok {
		p.log.Info("LPU injector connected, containers may start")
		return
	}
	p.log.Warn("LPU injector not connected, refusing container starts", "ids", ids, "err", err)
}

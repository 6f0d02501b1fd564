package driver

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	oteltrace "go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/hyperaccel/lpu-node/cmd/lpu-dra/internal/faults"
	"github.com/hyperaccel/lpu-node/cmd/lpu-dra/internal/publish"
	"github.com/hyperaccel/lpu-node/cmd/lpu-dra/internal/state"
	checkpoint "github.com/hyperaccel/lpu-node/internal/dracheckpoint"
	"github.com/hyperaccel/lpu-node/internal/podresources"
	"github.com/hyperaccel/lpu-node/pkg/arcslice"
	"github.com/hyperaccel/lpu-node/pkg/inject"
	"github.com/hyperaccel/lpu-node/pkg/trace"
)

// Devices is the node's device state: health.Monitor in production.
type Devices = state.Devices

// LabelSetter takes the labels to keep on the node (nodelabel.Keeper).
type LabelSetter = publish.LabelSetter

// Options configure a Driver.
type Options struct {
	NodeName string // also the pool name
	StateDir string // checkpoint
	CDIDir   string // per-claim CDI specs
	Inject   inject.Options
	// PCIeRoot resolves a PCI bus ID to its PCIe root; nil leaves the
	// attribute out.
	PCIeRoot func(pciBusID string) string
	// ArcSizes are the arc sizes published (config dra.arcSizes); empty
	// publishes every arc. Prepare accepts any valid arc either way.
	ArcSizes []int
	// DeviceClasses are the DeviceClasses a request may name to get this
	// driver's devices (config dra.deviceClasses); Prepare refuses a claim
	// whose request for our devices names another. nil: not checked.
	DeviceClasses []string
	Metrics       *Metrics // nil: not recorded
	// Holder names this instance in the checkpoint lock's journal: the
	// pod UID (two pods share the state dir during a rolling update);
	// empty: "pid-<pid>".
	Holder string
	// FollowInterval is how often the publisher looks for checkpoint
	// changes made by another instance; 0 means 1 s.
	FollowInterval time.Duration
	// DevicePlugin lists the LPUs device-plugin pods hold, from the
	// kubelet's PodResources (a node moved from the device plugin to DRA
	// without draining): those LPUs are not published and Prepare refuses
	// them until the pods end. nil: not looked at.
	DevicePlugin DevicePluginHolders
	// DevicePluginInterval is how often DevicePlugin is read; 0 means
	// DefaultDevicePluginInterval.
	DevicePluginInterval time.Duration
	// NodeLabels gets, at every publication, the node labels of what a
	// new claim could still be given (arcslice.Free.Labels, computed from
	// the published view); nil: the Node is not labelled.
	NodeLabels LabelSetter
	// Cordoned are the LPUs an operator took out of service
	// (cordon.Watcher): their arcs are published tainted and last; nil:
	// none.
	Cordoned publish.Cordon
	Tracer   oteltrace.Tracer
	Logger   *slog.Logger
}

// Driver implements kubeletplugin.DRAPlugin for LPUs: it turns the
// kubelet's calls into changes of the state and asks the publisher to
// republish after them.
type Driver struct {
	opts    Options
	devices Devices
	log     *slog.Logger
	tracer  oteltrace.Tracer
	state   *state.State
	pub     *publish.Publisher

	// mu guards what the driver learns outside the checkpoint: the
	// device-plugin view (dpHeld, dpKnown, dpAt) and podNames.
	mu       sync.Mutex
	dpHeld   map[string]podresources.Holder // LPU ID -> the device-plugin pod holding it
	dpKnown  bool                           // PodResources answered once (or is not read)
	dpAt     time.Time                      // when PodResources last answered
	podNames map[string][]podName           // claim UID -> its reservedFor pods' names (Holders)
}

// New loads the checkpoint (a corrupt one is an error: the prepared claims
// it held must not be forgotten) and returns the driver. Heal makes the
// CDI dir match the checkpoint; RunPublisher publishes; Prepare and
// friends serve the kubelet.
func New(devices Devices, opts Options) (*Driver, error) {
	if opts.NodeName == "" {
		return nil, errors.New("driver: empty node name")
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	tracer := opts.Tracer
	if tracer == nil {
		tracer = noop.NewTracerProvider().Tracer("lpu-dra")
	}
	st, err := state.New(devices, state.Options{StateDir: opts.StateDir, CDIDir: opts.CDIDir, Inject: opts.Inject,
		Holder: opts.Holder, Prepared: opts.Metrics.setPrepared, Logger: log})
	if err != nil {
		return nil, err
	}
	history, err := faults.Open(filepath.Join(opts.StateDir, faults.FileName), time.Now)
	if err != nil {
		// The history only steers selectors away from flaky LPUs: a lost
		// one is logged and started afresh, never a reason not to serve.
		log.Warn("fault history lost, starting an empty one", "err", err)
	}
	d := &Driver{opts: opts, devices: devices, log: log, tracer: tracer, state: st}
	d.pub = publish.New(devices, st, dpView{d}, publish.Options{NodeName: opts.NodeName, PCIeRoot: opts.PCIeRoot,
		ArcSizes: opts.ArcSizes, FollowInterval: opts.FollowInterval, NodeLabels: opts.NodeLabels,
		Published: opts.Metrics.republished, Faults: history, Cordoned: opts.Cordoned, Logger: log})
	return d, nil
}

// Heal makes the CDI dir match the checkpoint (state.State.Heal).
func (d *Driver) Heal() { d.state.Heal() }

// Republish asks RunPublisher for a new publication; it never blocks.
func (d *Driver) Republish() { d.pub.Republish() }

// Resources returns what the node's pool should hold now
// (publish.Publisher.Resources).
func (d *Driver) Resources() (resourceslice.DriverResources, error) { return d.pub.Resources() }

// RunPublisher publishes to sink until ctx ends (publish.Publisher.Run).
func (d *Driver) RunPublisher(ctx context.Context, sink publish.Sink) error {
	return d.pub.Run(ctx, sink)
}

// PrepareResourceClaims prepares every claim; per-claim failures are in
// the result, so one bad claim does not fail the others.
func (d *Driver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	changed := false
	for _, claim := range claims {
		start := time.Now()
		res, added, err := d.prepare(ctx, claim)
		d.opts.Metrics.observePrepare(time.Since(start), err)
		if err != nil {
			d.log.Warn("refused to prepare claim", "claim", claim.Namespace+"/"+claim.Name, "uid", claim.UID, "err", err)
			res = kubeletplugin.PrepareResult{Err: fmt.Errorf("claim %s/%s: %w", claim.Namespace, claim.Name, err)}
		}
		changed = changed || added
		out[claim.UID] = res
	}
	if changed {
		d.Republish()
	}
	return out, nil
}

func (d *Driver) prepare(ctx context.Context, claim *resourceapi.ResourceClaim) (kubeletplugin.PrepareResult, bool, error) {
	var pods []string
	for _, r := range claim.Status.ReservedFor {
		pods = append(pods, string(r.UID))
	}
	_, span := trace.StartPrepare(ctx, d.tracer, claim.Namespace, claim.Name, string(claim.UID), pods)
	res, added, lpus, err := d.prepareClaim(ctx, claim)
	if err == nil && lpus != nil {
		d.rememberPods(claim)
	}
	trace.RecordDevices(span, lpus)
	trace.End(span, err)
	return res, added, err
}

// prepareClaim checks the claim against the rules that need no state
// (pool, config, owner pod, DeviceClass), reads the device-plugin view
// again when it is old, and hands the claim to the state.
func (d *Driver) prepareClaim(ctx context.Context, claim *resourceapi.ResourceClaim) (kubeletplugin.PrepareResult, bool, []string, error) {
	uid := string(claim.UID)
	if uid == "" {
		return kubeletplugin.PrepareResult{}, false, nil, state.Refuse(state.ReasonBadDevice, "claim has no uid")
	}
	if claim.Status.Allocation == nil {
		return kubeletplugin.PrepareResult{}, false, nil, state.Refuse(state.ReasonBadDevice, "claim is not allocated")
	}
	ours, admin, err := d.ourDevices(claim)
	if err == nil && len(ours) > 0 {
		err = cmp.Or(refuseConfig(claim), refuseForeignPods(claim), refuseClass(claim, d.opts.DeviceClasses))
	}
	if err != nil {
		return kubeletplugin.PrepareResult{}, false, nil, err
	}
	var dpErr error // a stale device-plugin view: no new claim is given LPUs by it
	if len(ours) > 0 && !admin {
		dpErr = d.refreshDevicePlugin(ctx)
	}
	c, added, err := d.state.Prepare(ctx, state.Request{Claim: claim, Devices: ours, Admin: admin, Pods: podUIDs(claim),
		DevicePlugin: dpView{d}, DevicePluginErr: dpErr})
	if err != nil {
		return kubeletplugin.PrepareResult{}, false, c.LPUs, err
	}
	if c.UID == "" {
		return kubeletplugin.PrepareResult{}, false, nil, nil // none of our devices
	}
	if added {
		d.log.Info("prepared claim", "claim", claim.Namespace+"/"+claim.Name, "uid", uid, "lpus", c.LPUs, "cdiDevice", c.CDIDevice, "adminAccess", admin)
		d.noteCountClaim(claim, c)
	}
	return result(c), added, c.LPUs, nil
}

// noteCountClaim counts a claim of count devices only by its shape, and
// warns when its LPUs are not ring neighbours: the count path promises
// neighbours only when k of them were free in the order the scheduler saw.
func (d *Driver) noteCountClaim(claim *resourceapi.ResourceClaim, c checkpoint.Claim) {
	if len(c.Devices) == 0 || slices.ContainsFunc(c.Devices, func(dev checkpoint.Device) bool { return !arcslice.IsCountDevice(dev.Device) }) {
		return
	}
	snap, _ := d.devices.Snapshot()
	if snap.Layout == nil {
		return
	}
	if p, err := snap.Layout.Check(c.LPUs); err == nil && p.Contiguous {
		d.opts.Metrics.countClaim("arc")
		return
	}
	d.opts.Metrics.countClaim("scattered")
	d.log.Warn("count-path claim prepared with LPUs that are not ring neighbours", "claim", claim.Namespace+"/"+claim.Name, "lpus", c.LPUs)
}

// podUIDs are the pods a claim is reserved for, sorted.
func podUIDs(claim *resourceapi.ResourceClaim) []string {
	var out []string
	for _, r := range claim.Status.ReservedFor {
		if r.Resource == "pods" && r.UID != "" {
			out = append(out, string(r.UID))
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// result is the kubelet's answer for a prepared claim. The claim's one CDI
// device goes with the first device of each request: a container gets the
// whole claim once, never the same CDI device twice.
func result(c checkpoint.Claim) kubeletplugin.PrepareResult {
	res := kubeletplugin.PrepareResult{Devices: make([]kubeletplugin.Device, 0, len(c.Devices))}
	seen := map[string]bool{}
	for _, dev := range c.Devices {
		kd := kubeletplugin.Device{Requests: []string{dev.Request}, PoolName: dev.Pool, DeviceName: dev.Device}
		if req := baseRequest(dev.Request); !seen[req] {
			seen[req] = true
			kd.CDIDeviceIDs = []string{c.CDIDevice}
		}
		res.Devices = append(res.Devices, kd)
	}
	return res
}

// baseRequest drops a subrequest name: "lpus/singles" → "lpus".
func baseRequest(r string) string {
	base, _, _ := strings.Cut(r, "/")
	return base
}

// UnprepareResourceClaims removes each claim's spec, then its checkpoint
// entry. Unknown claims are not an error.
func (d *Driver) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := make(map[types.UID]error, len(claims))
	changed := false
	for _, claim := range claims {
		start := time.Now()
		removed, err := d.unprepare(ctx, claim)
		d.opts.Metrics.observeUnprepare(time.Since(start))
		if err != nil {
			err = fmt.Errorf("unprepare claim %s: %w", claim.String(), err)
			d.log.Warn("cannot unprepare claim", "claim", claim.String(), "uid", claim.UID, "err", err)
		}
		changed = changed || removed
		out[claim.UID] = err
	}
	if changed {
		d.Republish()
	}
	return out, nil
}

func (d *Driver) unprepare(ctx context.Context, claim kubeletplugin.NamespacedObject) (bool, error) {
	uid := string(claim.UID)
	c, err := d.state.Unprepare(ctx, uid)
	if err != nil || c.UID == "" {
		return false, err
	}
	d.log.Info("unprepared claim", "claim", claim.String(), "uid", uid, "lpus", c.LPUs)
	return true, nil
}

// HandleError logs background errors of the helper (publishing slices).
// None is fatal here: the helper retries, and the driver keeps serving
// prepared claims while the API server is away.
func (d *Driver) HandleError(_ context.Context, err error, msg string) {
	level := slog.LevelWarn
	if !errors.Is(err, kubeletplugin.ErrRecoverable) {
		level = slog.LevelError
	}
	d.log.Log(context.Background(), level, msg, "err", err)
}

// Prepared returns a copy of the prepared claims, by UID, as the
// checkpoint holds them now (another instance may have changed it).
func (d *Driver) Prepared() map[string]checkpoint.Claim {
	return d.state.Current().Claims
}

var _ kubeletplugin.DRAPlugin = (*Driver)(nil)

// ourDevices returns the claim's devices of this driver and whether they
// were allocated with adminAccess; a device of ours in another node's pool,
// or a claim mixing admin and tenant devices of ours, is refused.
func (d *Driver) ourDevices(claim *resourceapi.ResourceClaim) ([]checkpoint.Device, bool, error) {
	var ours []checkpoint.Device
	admins := 0
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != inject.Driver {
			continue // another driver's device in a shared claim
		}
		if r.Pool != d.opts.NodeName {
			return nil, false, state.Refuse(state.ReasonForeignPool, "device %s is in pool %q, this node's pool is %q", r.Device, r.Pool, d.opts.NodeName)
		}
		if r.AdminAccess != nil && *r.AdminAccess {
			admins++
		}
		ours = append(ours, checkpoint.Device{Request: r.Request, Pool: r.Pool, Device: r.Device})
	}
	if admins > 0 && admins < len(ours) {
		return nil, false, state.Refuse(state.ReasonBadDevice, "claim mixes adminAccess and tenant requests for %s devices", inject.Driver)
	}
	return ours, admins > 0, nil
}

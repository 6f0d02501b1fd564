package driver

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	oteltrace "go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	checkpoint "github.com/hyperaccel/lpu-node/internal/dracheckpoint"
	"github.com/hyperaccel/lpu-node/internal/health"
	"github.com/hyperaccel/lpu-node/internal/podresources"
	"github.com/hyperaccel/lpu-node/pkg/arcslice"
	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/inject"
	"github.com/hyperaccel/lpu-node/pkg/trace"
)

// Devices is the node's device state: health.Monitor in production.
type Devices interface {
	Snapshot() (health.Snapshot, <-chan struct{})
}

// Publisher publishes the pool: kubeletplugin.Helper in production.
type Publisher interface {
	PublishResources(ctx context.Context, resources resourceslice.DriverResources) error
}

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
	Tracer     oteltrace.Tracer
	Logger     *slog.Logger
}

// LabelSetter takes the labels to keep on the node (nodelabel.Keeper).
type LabelSetter interface {
	Set(labels map[string]string)
}

// Refusal reasons, the label values of lpu_dra_prepare_refusals_total.
const (
	ReasonForeignPool = "foreign_pool"
	ReasonBadDevice   = "unknown_device"
	ReasonUnhealthy   = "unhealthy"
	ReasonHeld        = "held"
	ReasonNotReady    = "not_ready"
	ReasonWrite       = "write_failed"
	ReasonChanged     = "allocation_changed"
)

// refusal is a Prepare error with its metric reason.
type refusal struct {
	reason string
	err    error
}

func (r *refusal) Error() string { return r.err.Error() }
func (r *refusal) Unwrap() error { return r.err }

func refuse(reason, format string, args ...any) *refusal {
	return &refusal{reason: reason, err: fmt.Errorf(format, args...)}
}

// Driver implements kubeletplugin.DRAPlugin for LPUs.
type Driver struct {
	opts    Options
	devices Devices
	log     *slog.Logger
	tracer  oteltrace.Tracer
	cdi     *cdi.Cache

	holder string
	mu     sync.Mutex // guards state; the files behind it are guarded by the checkpoint lock (update)
	state  *checkpoint.State

	kick chan struct{} // a republish is due

	pubMu    sync.Mutex // guards the builder cache
	builder  *arcslice.Builder
	shapeKey string

	dpMu    sync.Mutex                     // guards dpHeld, dpKnown, dpAt
	dpHeld  map[string]podresources.Holder // LPU ID -> the device-plugin pod holding it
	dpKnown bool                           // PodResources answered once (or is not read)
	dpAt    time.Time                      // when PodResources last answered

	namesMu  sync.Mutex           // guards podNames
	podNames map[string][]podName // claim UID -> its reservedFor pods' names (Holders)
}

// New loads the checkpoint (a corrupt one is an error: the prepared claims
// it held must not be forgotten), heals the CDI dir against it and returns
// the driver. Run publishes; Prepare and friends serve the kubelet.
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
	state, err := checkpoint.Load(opts.StateDir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(opts.CDIDir, 0o755); err != nil {
		return nil, fmt.Errorf("create cdi dir %s: %w", opts.CDIDir, err)
	}
	cache, err := cdi.NewCache(cdi.WithSpecDirs(opts.CDIDir), cdi.WithAutoRefresh(false))
	if err != nil {
		return nil, fmt.Errorf("cdi cache %s: %w", opts.CDIDir, err)
	}
	holder := opts.Holder
	if holder == "" {
		holder = fmt.Sprintf("pid-%d", os.Getpid())
	}
	d := &Driver{opts: opts, devices: devices, log: log, tracer: tracer, cdi: cache, state: state, holder: holder, kick: make(chan struct{}, 1)}
	d.opts.Metrics.setPrepared(len(state.Claims))
	d.checkJournal()
	return d, nil
}

// specFile is the file name of a claim's CDI spec.
func specFile(uid string) string {
	return cdi.GenerateTransientSpecName(inject.Driver, inject.ClaimClass, uid) + ".json"
}

// specPrefix starts every claim spec's file name.
var specPrefix = cdi.GenerateSpecName(inject.Driver, inject.ClaimClass) + "_"

// Heal makes the CDI dir match the checkpoint: it rewrites the spec of
// every prepared claim whose file is missing (the kubelet may recreate a
// container from it at any time) and removes claim specs of claims the
// checkpoint does not hold (a crash between spec write and checkpoint
// save). A claim naming LPUs discovery no longer knows stays prepared,
// logged, so that its Unprepare still works.
//
// It runs under the checkpoint lock on the checkpoint as it is on disk: a
// claim another driver instance (the other pod of a rolling update) has
// half prepared holds the lock, so its spec is never taken for an orphan.
func (d *Driver) Heal() {
	err := d.update(context.Background(), "heal", func(s *checkpoint.State) (bool, error) {
		snap, _ := d.devices.Snapshot()
		d.restoreSpecs(s, snap)
		d.removeOrphans(s)
		return false, nil
	})
	if err != nil {
		d.log.Error("cannot heal the cdi dir against the checkpoint", "err", err)
	}
}

// restoreSpecs rewrites the missing spec of every claim in s.
func (d *Driver) restoreSpecs(s *checkpoint.State, snap health.Snapshot) {
	for uid, c := range s.Claims {
		path := filepath.Join(d.opts.CDIDir, c.SpecName)
		if _, err := os.Stat(path); err == nil {
			continue
		}
		if snap.Inventory == nil {
			d.log.Error("no device inventory yet; the CDI spec of a prepared claim cannot be restored", "claim", c.Namespace+"/"+c.Name, "uid", uid)
			continue
		}
		devs, err := lookup(snap.Inventory, c.LPUs)
		if err != nil {
			d.log.Error("prepared claim names LPUs discovery does not know; its CDI spec cannot be restored",
				"claim", c.Namespace+"/"+c.Name, "uid", uid, "err", err)
			continue
		}
		if err := d.writeSpec(uid, devs, snap.Inventory.DriverVersion); err != nil {
			d.log.Error("cannot restore the CDI spec of a prepared claim", "claim", c.Namespace+"/"+c.Name, "uid", uid, "err", err)
			continue
		}
		d.log.Info("restored the CDI spec of a prepared claim", "claim", c.Namespace+"/"+c.Name, "uid", uid, "file", path)
	}
}

// removeOrphans removes the claim specs of claims s does not hold.
func (d *Driver) removeOrphans(s *checkpoint.State) {
	entries, err := os.ReadDir(d.opts.CDIDir)
	if err != nil {
		d.log.Warn("cannot list the cdi dir", "dir", d.opts.CDIDir, "err", err)
		return
	}
	for _, e := range entries {
		name := e.Name()
		uid, ok := strings.CutPrefix(strings.TrimSuffix(name, ".json"), specPrefix)
		if !ok || !strings.HasSuffix(name, ".json") {
			continue
		}
		if _, held := s.Claims[uid]; held {
			continue
		}
		if err := os.Remove(filepath.Join(d.opts.CDIDir, name)); err != nil {
			d.log.Warn("cannot remove an orphaned claim CDI spec", "file", name, "err", err)
			continue
		}
		d.log.Info("removed an orphaned claim CDI spec", "file", name)
	}
}

// lookup returns the devices of ids in that order.
func lookup(inv *device.Inventory, ids []string) ([]device.Device, error) {
	out := make([]device.Device, 0, len(ids))
	for _, id := range ids {
		dev, ok := inv.Device(id)
		if !ok {
			return nil, fmt.Errorf("LPU %s is unknown to discovery", id)
		}
		out = append(out, dev)
	}
	return out, nil
}

// writeSpec renders the claim's CDI spec and writes it durably, validated
// by the CDI library (inject.WriteSpecFile).
func (d *Driver) writeSpec(uid string, devs []device.Device, driverVersion string) error {
	spec, err := inject.ClaimSpec(uid, inject.ForDevices(devs, driverVersion, d.opts.Inject))
	if err != nil {
		return err
	}
	return inject.WriteSpecFile(filepath.Join(d.opts.CDIDir, specFile(uid)), spec)
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
	res, added, lpus, err := d.prepareLocked(ctx, claim)
	if err == nil && lpus != nil {
		d.rememberPods(claim)
	}
	trace.RecordDevices(span, lpus)
	trace.End(span, err)
	return res, added, err
}

func (d *Driver) prepareLocked(ctx context.Context, claim *resourceapi.ResourceClaim) (kubeletplugin.PrepareResult, bool, []string, error) {
	uid := string(claim.UID)
	if uid == "" {
		return kubeletplugin.PrepareResult{}, false, nil, refuse(ReasonBadDevice, "claim has no uid")
	}
	if claim.Status.Allocation == nil {
		return kubeletplugin.PrepareResult{}, false, nil, refuse(ReasonBadDevice, "claim is not allocated")
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
	var c checkpoint.Claim
	var added bool
	// A spec written for a checkpoint that could not be saved is removed
	// under the lock: once it is released, another instance (a surge
	// update) may prepare the claim and write its own spec of that name.
	undo := func() {
		if !added {
			return
		}
		if rmErr := d.cdi.RemoveSpec(specFile(uid)); rmErr != nil {
			d.log.Warn("cannot remove the spec of a claim whose checkpoint failed", "uid", uid, "err", rmErr)
		}
		if specRemovedHook != nil {
			specRemovedHook()
		}
	}
	err = d.updateOrUndo(ctx, "prepare", func(s *checkpoint.State) (bool, error) {
		var changed bool
		var err error
		c, added, changed, err = d.prepareIn(s, claim, ours, admin, dpErr)
		return changed, err
	}, undo)
	var r *refusal
	switch {
	case err != nil && added: // the spec was written, the checkpoint not: undo removed the spec
		return kubeletplugin.PrepareResult{}, false, c.LPUs, refuse(ReasonWrite, "%w", err)
	case errors.As(err, &r):
		return kubeletplugin.PrepareResult{}, false, c.LPUs, err
	case err != nil:
		return kubeletplugin.PrepareResult{}, false, c.LPUs, refuse(ReasonWrite, "%w", err)
	case c.UID == "":
		return kubeletplugin.PrepareResult{}, false, nil, nil // none of our devices
	}
	if added {
		d.log.Info("prepared claim", "claim", claim.Namespace+"/"+claim.Name, "uid", uid, "lpus", c.LPUs, "cdiDevice", c.CDIDevice, "adminAccess", admin)
	}
	return result(c), added, c.LPUs, nil
}

// prepareIn prepares the claim in s, the checkpoint as it is on disk under
// the lock: the claim as recorded (its pods merged in), or newly prepared
// (added: its spec written). changed says s must be saved.
func (d *Driver) prepareIn(s *checkpoint.State, claim *resourceapi.ResourceClaim, ours []checkpoint.Device, admin bool, dpErr error) (c checkpoint.Claim, added, changed bool, err error) {
	uid := string(claim.UID)
	pods := podUIDs(claim)
	if c, ok := s.Claims[uid]; ok {
		if !slices.Equal(c.Devices, ours) {
			return c, false, false, refuse(ReasonChanged, "already prepared with devices %v, now asked for %v", names(c.Devices), names(ours))
		}
		if c.AdminAccess != admin {
			return c, false, false, refuse(ReasonChanged, "already prepared with adminAccess %v, now asked with adminAccess %v", c.AdminAccess, admin)
		}
		// The kubelet prepares a claim once per node; should it ask again,
		// the claim's reservedFor now is the truth (reservations keeps it).
		c, changed = withPods(c, pods)
		s.Claims[uid] = c
		return c, false, changed, nil
	}
	if len(ours) == 0 {
		return checkpoint.Claim{}, false, false, nil
	}
	snap, _ := d.devices.Snapshot()
	if snap.Layout == nil || snap.Inventory == nil {
		return c, false, false, refuse(ReasonNotReady, "device discovery has not produced a valid ring layout yet")
	}
	inv := snap.Inventory
	ids, err := d.resolve(s, snap, ours, admin, dpErr)
	if err != nil {
		return c, false, false, err
	}
	p, err := snap.Layout.Check(ids)
	if err != nil {
		return c, false, false, refuse(ReasonBadDevice, "%w", err)
	}
	c.LPUs = p.IDs
	devs, err := lookup(inv, p.IDs)
	if err != nil {
		return c, false, false, refuse(ReasonBadDevice, "%w", err)
	}
	if err := d.writeSpec(uid, devs, inv.DriverVersion); err != nil {
		return c, false, false, refuse(ReasonWrite, "%w", err)
	}
	c = checkpoint.Claim{UID: uid, Namespace: claim.Namespace, Name: claim.Name, Devices: ours, LPUs: p.IDs,
		CDIDevice: inject.ClaimDeviceID(uid), SpecName: specFile(uid), Pods: pods, AdminAccess: admin}
	s.Claims[uid] = c
	return c, true, true, nil
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

// withPods returns c reserved for pods (sorted), so that lpu-nri admits its
// CDI device in their containers and no other pod's; changed says c.Pods
// differed.
func withPods(c checkpoint.Claim, pods []string) (checkpoint.Claim, bool) {
	if len(pods) == 0 {
		pods = nil
	}
	if slices.Equal(pods, c.Pods) {
		return c, false
	}
	c.Pods = pods
	return c, true
}

func names(devs []checkpoint.Device) []string {
	out := make([]string, len(devs))
	for i, d := range devs {
		out[i] = d.Request + ":" + d.Device
	}
	return out
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
	var c checkpoint.Claim
	err := d.update(ctx, "unprepare", func(s *checkpoint.State) (bool, error) {
		var ok bool
		if c, ok = s.Claims[uid]; !ok {
			return false, nil
		}
		if err := d.cdi.RemoveSpec(c.SpecName); err != nil {
			return false, fmt.Errorf("remove cdi spec %s: %w", filepath.Join(d.opts.CDIDir, c.SpecName), err)
		}
		delete(s.Claims, uid)
		return true, nil // a failed save keeps the claim; its spec comes back with the next Heal
	})
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
	return d.current().Claims
}

// current is a copy of the checkpoint as it is on disk, read without the
// lock (a save renames a complete file into place); the last state this
// instance saw when the file cannot be read.
func (d *Driver) current() *checkpoint.State {
	s, err := checkpoint.Load(d.opts.StateDir)
	d.mu.Lock()
	defer d.mu.Unlock()
	if err != nil {
		d.log.Warn("cannot read the checkpoint; using the last state read", "err", err)
		return d.state.Clone()
	}
	d.state = s
	d.opts.Metrics.setPrepared(len(s.Claims)) // the other instance's changes count too
	return s.Clone()
}

// update is the one way the checkpoint changes. Under the state dir's lock
// (checkpoint.Acquire) it reloads the checkpoint, since the other pod of a
// rolling update may have written it, runs fn on a copy, and saves the
// copy when fn reports a change. An error from fn, or from the save,
// leaves the checkpoint as it was. fn may write and remove CDI specs: they
// change under the same lock.
func (d *Driver) update(ctx context.Context, op string, fn func(*checkpoint.State) (bool, error)) error {
	return d.updateOrUndo(ctx, op, fn, nil)
}

// saveState saves the checkpoint; tests replace it to make a save fail.
var saveState = checkpoint.Save

// specRemovedHook, when set (tests only), runs right after Prepare removed
// the spec of a claim whose checkpoint save failed.
var specRemovedHook func()

// updateOrUndo is update, running undo (when not nil) under the lock
// when fn changed the state and the save failed: what fn did outside the
// state (a spec written) is taken back before another instance can look.
func (d *Driver) updateOrUndo(ctx context.Context, op string, fn func(*checkpoint.State) (bool, error), undo func()) error {
	l, err := checkpoint.Acquire(ctx, d.opts.StateDir, d.holder, op)
	if err != nil {
		return err
	}
	defer d.release(l)
	d.mu.Lock()
	defer d.mu.Unlock()
	s, err := checkpoint.Load(d.opts.StateDir)
	if err != nil {
		return err
	}
	d.state = s
	work := s.Clone()
	changed, err := fn(work)
	if err != nil || !changed {
		return err
	}
	if err := saveState(d.opts.StateDir, work); err != nil {
		if undo != nil {
			undo()
		}
		return err
	}
	d.state = work
	d.opts.Metrics.setPrepared(len(work.Claims))
	return nil
}

// release drops the lock and logs the hold: holder, operation, times.
func (d *Driver) release(l *checkpoint.Lock) {
	rec, err := l.Release()
	if err != nil {
		d.log.Warn("checkpoint lock journal", "err", err)
	}
	level := slog.LevelDebug
	if l.Waited() > 100*time.Millisecond {
		level = slog.LevelInfo // another instance held it: a rolling update
	}
	d.log.Log(context.Background(), level, "checkpoint lock released", "holder", rec.Holder, "op", rec.Op,
		"acquired", rec.Acquired.UTC().Format(time.RFC3339Nano), "released", rec.Released.UTC().Format(time.RFC3339Nano), "waited", l.Waited())
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
			return nil, false, refuse(ReasonForeignPool, "device %s is in pool %q, this node's pool is %q", r.Device, r.Pool, d.opts.NodeName)
		}
		if r.AdminAccess != nil && *r.AdminAccess {
			admins++
		}
		ours = append(ours, checkpoint.Device{Request: r.Request, Pool: r.Pool, Device: r.Device})
	}
	if admins > 0 && admins < len(ours) {
		return nil, false, refuse(ReasonBadDevice, "claim mixes adminAccess and tenant requests for %s devices", inject.Driver)
	}
	return ours, admins > 0, nil
}

// resolve turns the claim's devices into LPU IDs, refusing an arc this node
// does not have, overlapping devices, and LPUs that are unknown, unhealthy
// or held by another claim in s (an admin claim holds nothing and is held
// by nothing). dpErr, when set, says the device-plugin view could not be
// read fresh: a tenant claim is refused.
func (d *Driver) resolve(s *checkpoint.State, snap health.Snapshot, ours []checkpoint.Device, admin bool, dpErr error) ([]string, error) {
	inv := snap.Inventory
	var ids []string
	for _, dev := range ours {
		arc, err := arcslice.ParseDeviceName(dev.Device)
		if err != nil {
			return nil, refuse(ReasonBadDevice, "%w", err)
		}
		arcIDs := snap.Layout.ArcIDs(arc)
		if arcIDs == nil || (arc.Size == len(snap.Layout.Rings()[arc.Ring]) && arc.Start != 0) {
			return nil, refuse(ReasonBadDevice, "device %s is not an arc of this node", dev.Device)
		}
		for _, id := range arcIDs {
			if slices.Contains(ids, id) {
				return nil, refuse(ReasonBadDevice, "devices of the claim overlap on %s", id)
			}
			lpu, ok := inv.Device(id)
			if !ok {
				return nil, refuse(ReasonBadDevice, "device %s: LPU %s is unknown to discovery", dev.Device, id)
			}
			if !lpu.Health.Healthy {
				return nil, refuse(ReasonUnhealthy, "device %s: LPU %s is unhealthy: %s", dev.Device, id, lpu.Health.Reason)
			}
			if holder := s.Holder(id); holder != "" && !admin {
				c := s.Claims[holder]
				return nil, refuse(ReasonHeld, "device %s: LPU %s is held by claim %s/%s (%s)", dev.Device, id, c.Namespace, c.Name, holder)
			}
			if !admin && !d.devicePluginKnown() {
				return nil, refuse(ReasonNotReady, "device %s: the kubelet's PodResources has not answered yet, so a device-plugin pod may hold LPU %s", dev.Device, id)
			}
			if !admin && dpErr != nil {
				return nil, refuse(ReasonNotReady, "device %s: a device-plugin pod may hold LPU %s: %w", dev.Device, id, dpErr)
			}
			if h, ok := d.devicePluginHolder(id); ok && !admin {
				return nil, refuse(ReasonHeld, "device %s: LPU %s is held by device-plugin pod %s/%s (container %s): the node moved to DRA while it runs; the LPU is published again once that pod ends",
					dev.Device, id, h.Namespace, h.Pod, h.Container)
			}
			ids = append(ids, id)
		}
	}
	return ids, nil
}

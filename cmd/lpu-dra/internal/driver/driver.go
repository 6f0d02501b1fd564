package driver

import (
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
	Metrics  *Metrics // nil: not recorded
	Tracer   oteltrace.Tracer
	Logger   *slog.Logger
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

	mu    sync.Mutex // guards state and the files behind it
	state *checkpoint.State

	kick chan struct{} // a republish is due

	pubMu    sync.Mutex // guards the builder cache
	builder  *arcslice.Builder
	shapeKey string
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
	d := &Driver{opts: opts, devices: devices, log: log, tracer: tracer, cdi: cache, state: state, kick: make(chan struct{}, 1)}
	d.opts.Metrics.setPrepared(len(state.Claims))
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
func (d *Driver) Heal() {
	snap, _ := d.devices.Snapshot()
	d.mu.Lock()
	defer d.mu.Unlock()
	for uid, c := range d.state.Claims {
		path := filepath.Join(d.opts.CDIDir, c.SpecName)
		if _, err := os.Stat(path); err == nil {
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
		if _, held := d.state.Claims[uid]; held {
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
	res, added, lpus, err := d.prepareLocked(claim)
	trace.RecordDevices(span, lpus)
	trace.End(span, err)
	return res, added, err
}

func (d *Driver) prepareLocked(claim *resourceapi.ResourceClaim) (kubeletplugin.PrepareResult, bool, []string, error) {
	uid := string(claim.UID)
	if uid == "" {
		return kubeletplugin.PrepareResult{}, false, nil, refuse(ReasonBadDevice, "claim has no uid")
	}
	if claim.Status.Allocation == nil {
		return kubeletplugin.PrepareResult{}, false, nil, refuse(ReasonBadDevice, "claim is not allocated")
	}
	ours, err := d.ourDevices(claim)
	if err == nil && len(ours) > 0 {
		err = refuseConfig(claim)
	}
	if err != nil {
		return kubeletplugin.PrepareResult{}, false, nil, err
	}

	d.mu.Lock()
	defer d.mu.Unlock()
	pods := podUIDs(claim)
	if c, ok := d.state.Claims[uid]; ok {
		if !slices.Equal(c.Devices, ours) {
			return kubeletplugin.PrepareResult{}, false, c.LPUs,
				refuse(ReasonChanged, "already prepared with devices %v, now asked for %v", names(c.Devices), names(ours))
		}
		if err := d.addPods(c, pods); err != nil {
			return kubeletplugin.PrepareResult{}, false, c.LPUs, refuse(ReasonWrite, "%w", err)
		}
		return result(c), false, c.LPUs, nil
	}
	if len(ours) == 0 {
		return kubeletplugin.PrepareResult{}, false, nil, nil
	}

	snap, _ := d.devices.Snapshot()
	if snap.Layout == nil || snap.Inventory == nil {
		return kubeletplugin.PrepareResult{}, false, nil, refuse(ReasonNotReady, "device discovery has not produced a valid ring layout yet")
	}
	inv := snap.Inventory
	ids, err := d.resolve(snap, ours)
	if err != nil {
		return kubeletplugin.PrepareResult{}, false, nil, err
	}
	p, err := snap.Layout.Check(ids)
	if err != nil {
		return kubeletplugin.PrepareResult{}, false, nil, refuse(ReasonBadDevice, "%w", err)
	}
	devs, err := lookup(inv, p.IDs)
	if err != nil {
		return kubeletplugin.PrepareResult{}, false, nil, refuse(ReasonBadDevice, "%w", err)
	}
	if err := d.writeSpec(uid, devs, inv.DriverVersion); err != nil {
		return kubeletplugin.PrepareResult{}, false, p.IDs, refuse(ReasonWrite, "%w", err)
	}
	c := checkpoint.Claim{UID: uid, Namespace: claim.Namespace, Name: claim.Name, Devices: ours, LPUs: p.IDs,
		CDIDevice: inject.ClaimDeviceID(uid), SpecName: specFile(uid), Pods: pods}
	d.state.Claims[uid] = c
	if err := checkpoint.Save(d.opts.StateDir, d.state); err != nil {
		delete(d.state.Claims, uid)
		if rmErr := d.cdi.RemoveSpec(specFile(uid)); rmErr != nil {
			d.log.Warn("cannot remove the spec of a claim whose checkpoint failed", "uid", uid, "err", rmErr)
		}
		return kubeletplugin.PrepareResult{}, false, p.IDs, refuse(ReasonWrite, "%w", err)
	}
	d.opts.Metrics.setPrepared(len(d.state.Claims))
	d.log.Info("prepared claim", "claim", claim.Namespace+"/"+claim.Name, "uid", uid, "lpus", p.IDs, "contiguous", p.Contiguous, "cdiDevice", c.CDIDevice)
	return result(c), true, p.IDs, nil
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

// addPods records pods a shared claim gained since it was prepared, so
// that lpu-nri admits its CDI device in their containers too. d.mu is held.
func (d *Driver) addPods(c checkpoint.Claim, pods []string) error {
	merged := slices.Compact(slices.Sorted(slices.Values(append(append([]string(nil), c.Pods...), pods...))))
	if slices.Equal(merged, c.Pods) {
		return nil
	}
	old := c
	c.Pods = merged
	d.state.Claims[c.UID] = c
	if err := checkpoint.Save(d.opts.StateDir, d.state); err != nil {
		d.state.Claims[c.UID] = old
		return err
	}
	return nil
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
		removed, err := d.unprepare(claim)
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

func (d *Driver) unprepare(claim kubeletplugin.NamespacedObject) (bool, error) {
	uid := string(claim.UID)
	d.mu.Lock()
	defer d.mu.Unlock()
	c, ok := d.state.Claims[uid]
	if !ok {
		return false, nil
	}
	if err := d.cdi.RemoveSpec(c.SpecName); err != nil {
		return false, fmt.Errorf("remove cdi spec %s: %w", filepath.Join(d.opts.CDIDir, c.SpecName), err)
	}
	delete(d.state.Claims, uid)
	if err := checkpoint.Save(d.opts.StateDir, d.state); err != nil {
		d.state.Claims[uid] = c // the spec comes back with the next Heal
		return false, err
	}
	d.opts.Metrics.setPrepared(len(d.state.Claims))
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

// Prepared returns a copy of the prepared claims, by UID.
func (d *Driver) Prepared() map[string]checkpoint.Claim {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[string]checkpoint.Claim, len(d.state.Claims))
	for k, v := range d.state.Claims {
		out[k] = v
	}
	return out
}

// held returns the LPUs of prepared claims.
func (d *Driver) held() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.state.Held()
}

var _ kubeletplugin.DRAPlugin = (*Driver)(nil)

// ourDevices returns the claim's devices of this driver; a device of ours in
// another node's pool is refused.
func (d *Driver) ourDevices(claim *resourceapi.ResourceClaim) ([]checkpoint.Device, error) {
	var ours []checkpoint.Device
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != inject.Driver {
			continue // another driver's device in a shared claim
		}
		if r.Pool != d.opts.NodeName {
			return nil, refuse(ReasonForeignPool, "device %s is in pool %q, this node's pool is %q", r.Device, r.Pool, d.opts.NodeName)
		}
		ours = append(ours, checkpoint.Device{Request: r.Request, Pool: r.Pool, Device: r.Device})
	}
	return ours, nil
}

// resolve turns the claim's devices into LPU IDs, refusing an arc this node
// does not have, overlapping devices, and LPUs that are unknown, unhealthy
// or held by another claim. d.mu is held.
func (d *Driver) resolve(snap health.Snapshot, ours []checkpoint.Device) ([]string, error) {
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
			if holder := d.state.Holder(id); holder != "" {
				c := d.state.Claims[holder]
				return nil, refuse(ReasonHeld, "device %s: LPU %s is held by claim %s/%s (%s)", dev.Device, id, c.Namespace, c.Name, holder)
			}
			ids = append(ids, id)
		}
	}
	return ids, nil
}

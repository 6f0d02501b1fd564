// Package statuswriter writes the status.devices entries of lpu-dra's
// prepared claims to the API server in the background, so that an API
// server that is slow or away delays the status, never a pod.
package statuswriter

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	resourceapply "k8s.io/client-go/applyconfigurations/resource/v1"
	"k8s.io/client-go/kubernetes"

	checkpoint "github.com/hyperaccel/lpu-node/internal/dracheckpoint"
	"github.com/hyperaccel/lpu-node/internal/health"
	"github.com/hyperaccel/lpu-node/pkg/arcslice"
	"github.com/hyperaccel/lpu-node/pkg/claimstatus"
	"github.com/hyperaccel/lpu-node/pkg/inject"
)

// FieldManager is lpu-dra's server-side apply field manager: it owns
// exactly the status.devices entries of its driver, so the scheduler's
// allocation and other drivers' entries are never touched.
const FieldManager = "lpu-dra"

// Options bound the claim status writer's retries.
type Options struct {
	// Attempts per claim update before it is given up (logged); 8 when 0.
	Attempts int
	// FirstBackoff doubles after each failed attempt up to MaxBackoff;
	// 250 ms and 15 s when 0 (8 attempts span about a minute).
	FirstBackoff, MaxBackoff time.Duration
	// Timeout bounds one request; 5 s when 0.
	Timeout time.Duration
	Logger  *slog.Logger
}

// Writer writes the status.devices entries of prepared claims in the
// background. Prepare only queues (a map insert): an API server that is
// slow or away delays the status, never a pod. The newest update of a
// claim replaces a queued older one, so a Prepare followed by an
// Unprepare ends cleared whatever the timing.
type Writer struct {
	client kubernetes.Interface
	opts   Options
	log    *slog.Logger

	mu      sync.Mutex
	pending map[types.UID]*statusOp
	kick    chan struct{}

	written, dropped atomic.Int64
}

// statusOp is one claim's wanted status: its entries, or none to clear.
type statusOp struct {
	namespace, name string
	uid             types.UID
	devices         []*resourceapply.AllocatedDeviceStatusApplyConfiguration
	attempt         int
	notBefore       time.Time
}

// New returns a writer using client; Run does the writing.
func New(client kubernetes.Interface, opts Options) *Writer {
	if opts.Attempts <= 0 {
		opts.Attempts = 8
	}
	if opts.FirstBackoff <= 0 {
		opts.FirstBackoff = 250 * time.Millisecond
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = 15 * time.Second
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Second
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Writer{client: client, opts: opts, log: log, pending: map[types.UID]*statusOp{}, kick: make(chan struct{}, 1)}
}

// Written and Dropped count claim updates that reached the API server and
// those given up or refused by it.
func (w *Writer) Written() int64 { return w.written.Load() }

// Dropped counts claim updates given up after their attempts or refused
// by the API server.
func (w *Writer) Dropped() int64 { return w.dropped.Load() }

// Queue replaces the claim's pending update; nil devices clears it.
func (w *Writer) Queue(namespace, name string, uid types.UID, devices []*resourceapply.AllocatedDeviceStatusApplyConfiguration) {
	if uid == "" || name == "" {
		return
	}
	w.mu.Lock()
	w.pending[uid] = &statusOp{namespace: namespace, name: name, uid: uid, devices: devices}
	w.mu.Unlock()
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// Run writes queued updates until ctx ends, one request at a time.
func (w *Writer) Run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		op, wait := w.next(time.Now())
		if op != nil {
			w.write(ctx, op)
			continue
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-w.kick:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// next takes the earliest due update, or says how long until one is due.
func (w *Writer) next(now time.Time) (*statusOp, time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var first *statusOp
	for _, op := range w.pending {
		if first == nil || op.notBefore.Before(first.notBefore) {
			first = op
		}
	}
	if first == nil {
		return nil, time.Hour
	}
	if d := first.notBefore.Sub(now); d > 0 {
		return nil, d
	}
	delete(w.pending, first.uid)
	return first, 0
}

// write applies one update and requeues it after a transient failure,
// unless a newer update of the claim arrived meanwhile.
func (w *Writer) write(ctx context.Context, op *statusOp) {
	err := w.apply(ctx, op)
	log := w.log.With("claim", op.namespace+"/"+op.name, "uid", op.uid, "attempt", op.attempt+1, "clear", op.devices == nil)
	switch {
	case err == nil:
		w.written.Add(1)
		log.Debug("wrote claim device status")
		return
	case ctx.Err() != nil:
		return
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		// The claim is gone or is another object by now: nothing to show.
		w.dropped.Add(1)
		log.Debug("claim gone; device status not written", "err", err)
		return
	case apierrors.IsForbidden(err) || (apierrors.IsInvalid(err) && strings.Contains(err.Error(), "requires extra permission")):
		// The granular status check (1.36+) answers Invalid, not Forbidden.
		w.dropped.Add(1)
		log.Error("not allowed to write claim device status: the service account needs patch on resourceclaims/status and associated-node:patch on resourceclaims/driver "+inject.Driver, "err", err)
		return
	case !transient(err):
		w.dropped.Add(1)
		log.Warn("API server refused claim device status", "err", err)
		return
	case op.attempt+1 >= w.opts.Attempts:
		w.dropped.Add(1)
		log.Warn("gave up writing claim device status", "err", err)
		return
	}
	op.attempt++
	op.notBefore = time.Now().Add(w.backoff(op.attempt))
	log.Debug("claim device status write failed; retrying", "err", err, "in", time.Until(op.notBefore).Round(time.Millisecond))
	w.mu.Lock()
	if _, newer := w.pending[op.uid]; !newer {
		w.pending[op.uid] = op
	}
	w.mu.Unlock()
}

func (w *Writer) backoff(attempt int) time.Duration {
	d := w.opts.FirstBackoff
	for i := 1; i < attempt && d < w.opts.MaxBackoff; i++ {
		d *= 2
	}
	return min(d, w.opts.MaxBackoff)
}

// transient says whether a retry may succeed: the API server was away,
// slow or overloaded.
func transient(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return true // transport: connection refused, timeout
	}
	code := status.Status().Code
	return code == http.StatusTooManyRequests || code >= 500 || apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err)
}

// apply server-side applies the claim's entries of this driver. The UID
// makes it a precondition: a claim deleted and recreated under the same
// name is not written.
func (w *Writer) apply(ctx context.Context, op *statusOp) error {
	ctx, cancel := context.WithTimeout(ctx, w.opts.Timeout)
	defer cancel()
	status := resourceapply.ResourceClaimStatus()
	if len(op.devices) > 0 {
		status.WithDevices(op.devices...)
	}
	cfg := resourceapply.ResourceClaim(op.name, op.namespace).WithUID(op.uid).WithStatus(status)
	_, err := w.client.ResourceV1().ResourceClaims(op.namespace).ApplyStatus(ctx, cfg, metav1.ApplyOptions{FieldManager: FieldManager, Force: true})
	return err
}

// Entries are the status.devices entries of the claim's devices of
// this driver: for each arc its LPUs in ring order and their device nodes.
// An arc the node does not have (cannot happen after a Prepare) is left
// out, logged.
func Entries(snap health.Snapshot, devs []checkpoint.Device, log *slog.Logger) []*resourceapply.AllocatedDeviceStatusApplyConfiguration {
	if snap.Layout == nil || snap.Inventory == nil {
		return nil
	}
	out := make([]*resourceapply.AllocatedDeviceStatusApplyConfiguration, 0, len(devs))
	for _, dev := range devs {
		arc, err := arcslice.ParseDeviceName(dev.Device)
		if err != nil {
			log.Warn("claim status: bad device name", "device", dev.Device, "err", err)
			continue
		}
		data := claimstatus.Data{LPUs: snap.Layout.ArcIDs(arc), Ring: arc.Ring, Start: arc.Start, Size: arc.Size}
		for _, id := range data.LPUs {
			if lpu, ok := snap.Inventory.Device(id); ok {
				for _, n := range lpu.NodeList() {
					data.DeviceNodes = append(data.DeviceNodes, n.Path)
				}
			}
		}
		raw, err := data.Marshal()
		if err != nil {
			log.Warn("claim status: arc not on this node", "device", dev.Device, "err", err)
			continue
		}
		out = append(out, resourceapply.AllocatedDeviceStatus().WithDriver(inject.Driver).WithPool(dev.Pool).
			WithDevice(dev.Device).WithData(runtime.RawExtension{Raw: raw}))
	}
	return out
}

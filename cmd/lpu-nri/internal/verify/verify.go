package verify

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/containerd/nri/pkg/api"

	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/inventory"
	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/ledger"
	"github.com/hyperaccel/lpu-node/cmd/lpu-nri/internal/nriedit"
	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/inject"
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

// Config holds the parts a Verifier works with.
type Config struct {
	Key     *inject.Key      // verifies the allocation seal; required
	Store   *inventory.Store // the node's LPUs; required
	Options inject.Options   // driver mounts and extra env
	// Check is the optional PodResources cross-check; nil disables it.
	Check        CrossChecker
	CheckTimeout time.Duration // default and cap: MaxCrossCheckTimeout
	Log          *slog.Logger  // nil discards
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
	// ClaimWait bounds how long Decide re-reads the claims of a pod
	// lpu-dra has not recorded yet (claimWait); zero is DefaultClaimWait,
	// negative does not wait.
	ClaimWait time.Duration
}

// Verifier applies the trust rules (package doc). It is safe for
// concurrent use: the inventory is an atomic snapshot and the ledger locks
// itself.
type Verifier struct {
	key          *inject.Key
	store        *inventory.Store
	opts         inject.Options
	check        CrossChecker
	checkTimeout time.Duration
	log          *slog.Logger
	claims       func(podUID string, claimUIDs []string) ([]string, error)
	claimWait    time.Duration
	ledger       *ledger.Ledger
	acceptV1     bool
	allowNS      []string
}

// New returns a Verifier from cfg.
func New(cfg Config) (*Verifier, error) {
	if cfg.Key == nil {
		return nil, errors.New("verify: no seal key")
	}
	if cfg.Store == nil {
		return nil, errors.New("verify: no inventory store")
	}
	v := &Verifier{key: cfg.Key, store: cfg.Store, opts: cfg.Options, check: cfg.Check,
		checkTimeout: cfg.CheckTimeout, log: cmp.Or(cfg.Log, slog.New(slog.DiscardHandler)), ledger: cfg.Ledger,
		acceptV1: cfg.AcceptLegacySeals, allowNS: cfg.AllowNamespaces, claims: cfg.Claims,
		claimWait: claimWait(cfg.ClaimWait)}
	if v.checkTimeout <= 0 || v.checkTimeout > MaxCrossCheckTimeout {
		v.checkTimeout = MaxCrossCheckTimeout
	}
	return v, nil
}

// CheckTimeout is the cross-check's effective bound.
func (v *Verifier) CheckTimeout() time.Duration { return v.checkTimeout }

// Key is the node's seal key.
func (v *Verifier) Key() *inject.Key { return v.key }

// Refusal is the error CreateContainer returns when it refuses a container:
// the runtime fails the creation and shows the message to the user.
type Refusal struct {
	Reason string // a Reason* value
	Err    error
}

func (r *Refusal) Error() string { return "lpu-nri refused the container: " + r.Err.Error() }

// Unwrap returns the cause.
func (r *Refusal) Unwrap() error { return r.Err }

func refuse(reason string, format string, args ...any) *Refusal {
	return &Refusal{Reason: reason, Err: fmt.Errorf(format, args...)}
}

// Decide applies the trust rules (package doc) in order and returns the
// adjustment with the verified allocation (IDs in ring order, and its
// allocation ID when the device plugin wrote one), an empty allocation for
// a container without one, or a *Refusal. Apart from the optional cross-check
// and the claims read it does no I/O.
func (v *Verifier) Decide(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, inject.Allocation, error) {
	var none inject.Allocation
	if key, ok := inject.HasReservedKey(pod.GetAnnotations()); ok {
		return nil, none, refuse(ReasonPodAnnotation,
			"pod annotation %q is reserved for the LPU device plugin; a pod cannot claim LPUs through annotations (runtimes copy pod annotations into containers): remove it from the pod", key)
	}
	if n := visibleDevicesCopies(ctr.GetEnv()); n > 1 {
		return nil, none, refuse(ReasonBadValue,
			"container env sets %s %d times (image and pod spec both set it?): the runtime would keep the last copy instead of the value lpu-nri sets, so set it at most once (lpu-nri overrides it anyway)",
			inject.EnvVisibleDevices, n)
	}
	if claims := claimUIDs(ctr.GetCDIDevices()); len(claims) > 0 {
		return nil, none, v.decideClaims(pod, ctr, claims)
	}
	alloc, err := v.key.OpenAllocation(ctr.GetAnnotations())
	ids := alloc.IDs
	switch {
	case errors.Is(err, inject.ErrNoAllocation):
		adj := nriedit.Adjustment(inject.Unallocated())
		if len(ctr.GetLinux().GetDevices()) == 0 && len(ctr.GetLinux().GetResources().GetDevices()) == 0 {
			return adj, none, nil
		}
		if err := v.checkCarried(v.store.Load(), pod, ctr, nil); err != nil {
			return nil, none, err
		}
		return adj, none, nil
	case errors.Is(err, inject.ErrBadSeal):
		return nil, none, refuse(ReasonBadSeal, "allocation annotation not sealed by this node's device plugin: %w", err)
	case err != nil:
		return nil, none, refuse(ReasonBadValue, "allocation annotation invalid: %w", err)
	case alloc.Version == inject.SealV1 && !v.acceptV1:
		return nil, none, refuse(ReasonLegacySeal,
			"allocation %s is sealed in the legacy v1 form (not bound to this node); recreate the pod so the device plugin seals it again, or set security.acceptLegacySeals: true during the upgrade", inject.EncodeIDs(ids))
	}
	snap := v.store.Load()
	if !snap.Ready() {
		return nil, none, refuse(ReasonNoInventory, "no LPU inventory yet (%v); cannot verify %s", snap.Err, inject.EncodeIDs(ids))
	}
	var buf [8]device.Device // a server's ring of 8 fits without a heap copy; more spill over
	devs, err := v.allocated(snap, ids, buf[:0])
	if err != nil {
		return nil, none, err
	}
	if err := v.checkHolder(ctx, snap, pod, ctr, alloc); err != nil {
		return nil, none, err
	}
	return nriedit.Adjustment(inject.ForDevices(devs, snap.DriverVersion(), v.opts)), alloc, nil
}

// allocated appends the devices of ids to devs (step 4 of Decide): each
// must be in snap and healthy.
func (v *Verifier) allocated(snap *inventory.Snapshot, ids []string, devs []device.Device) ([]device.Device, error) {
	for _, id := range ids {
		d, ok := snap.Device(id)
		if !ok {
			v.store.Kick() // the inventory may be behind the device plugin's
			return nil, refuse(ReasonUnknownDevice, "allocated device %q is not on this node (known: %d LPUs)", id, len(snap.Inventory.Devices))
		}
		if !d.Health.Healthy {
			return nil, refuse(ReasonUnhealthyDevice, "allocated device %s is unhealthy: %s", id, d.Health.Reason)
		}
		devs = append(devs, *d)
	}
	return devs, nil
}

// checkHolder runs steps 5 to 7 of Decide for a verified allocation: the
// kubelet's PodResources, the nodes the container already carries, and
// the ledger.
func (v *Verifier) checkHolder(ctx context.Context, snap *inventory.Snapshot, pod *api.PodSandbox, ctr *api.Container, alloc inject.Allocation) error {
	ids := alloc.IDs
	if v.check != nil {
		cctx, cancel := context.WithTimeout(ctx, v.checkTimeout)
		err := v.check.Check(cctx, pod.GetNamespace(), pod.GetName(), ctr.GetName(), ids)
		cancel()
		if err != nil {
			return refuse(ReasonPodResources, "kubelet pod resources check: %w", err)
		}
	}
	if len(ctr.GetLinux().GetDevices()) > 0 || len(ctr.GetLinux().GetResources().GetDevices()) > 0 {
		if err := v.checkCarried(snap, pod, ctr, ids); err != nil {
			return err
		}
	}
	if v.ledger != nil && alloc.ID != "" {
		if err := v.claimAllocation(alloc.ID, pod); err != nil {
			return refuse(ReasonReplayed, "allocation %s of pod %s/%s: %w", alloc.ID, pod.GetNamespace(), pod.GetName(), err)
		}
	}
	return nil
}

// hasGuardHook reports whether the container's pristine spec holds the

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

// checkCarried applies the validator's checks to what the container
// already has (runtimes without validators never ask): LPU nodes beyond
// ids (see foreignNodes), or device cgroup rules admitting LPUs beyond ids
// (see cgroupRefusal), refuse the container.
func (v *Verifier) checkCarried(snap *inventory.Snapshot, pod *api.PodSandbox, ctr *api.Container, ids []string) error {
	if !snap.Ready() {
		return nil // nothing is known to be an LPU; the validator refuses later
	}
	if err := v.foreignNodes(snap, pod, ctr, ids); err != nil {
		return err
	}
	return v.checkCgroup(snap, pod, ctr, ids)
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

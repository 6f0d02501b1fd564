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
		allowNS: cfg.AllowNamespaces, claims: cfg.Claims,
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

// The rules' errors: a Refusal is (errors.Is) the one of the rule that
// refused (package doc), so a caller tells the rules apart; the Reason is
// the metrics label, shared by several rules.
var (
	ErrPodAnnotations    = errors.New("trust rule: pod annotations")
	ErrOneVisibleDevices = errors.New("trust rule: one LPU_VISIBLE_DEVICES")
	ErrSealedAllocation  = errors.New("trust rule: sealed allocation")
	ErrKnownHealthy      = errors.New("trust rule: known, healthy LPUs")
	ErrPodResources      = errors.New("trust rule: PodResources agree")
	ErrNoOtherLPU        = errors.New("trust rule: no other LPU")
	ErrReplayLedger      = errors.New("trust rule: replay ledger")
	ErrPreparedClaims    = errors.New("trust rule: prepared claims")
	ErrFinalDevices      = errors.New("validator: final LPU devices")
	// ErrPluginCDIDevice is the validator's refusal of an LPU CDI device a
	// plugin adds; it is also ErrFinalDevices under errors.Is.
	ErrPluginCDIDevice = fmt.Errorf("validator: LPU CDI device from a plugin: %w", ErrFinalDevices)
)

// Refusal is the error CreateContainer returns when it refuses a container:
// the runtime fails the creation and shows the message to the user.
type Refusal struct {
	Reason string // a Reason* value
	Rule   error  // the refusing rule's Err* value
	Err    error
}

func (r *Refusal) Error() string { return "lpu-nri refused the container: " + r.Err.Error() }

// Unwrap returns the cause.
func (r *Refusal) Unwrap() error { return r.Err }

// Is reports whether target is the refusing rule's error (or one it
// wraps: ErrPluginCDIDevice is ErrFinalDevices), so errors.Is tells the
// rules apart (the cause's chain is Unwrap's).
func (r *Refusal) Is(target error) bool { return r.Rule != nil && errors.Is(r.Rule, target) }

func refuse(rule error, reason string, format string, args ...any) *Refusal {
	return &Refusal{Reason: reason, Rule: rule, Err: fmt.Errorf(format, args...)}
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

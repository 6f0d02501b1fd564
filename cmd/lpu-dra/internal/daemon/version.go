package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/discovery"
)

// minMinor is the oldest Kubernetes 1.x whose scheduler lpu-dra's arcs are
// cheap in: before 1.37 (and in 1.37 with the beta gates
// ConsumableCapacity, DeviceBindingConditions or FractionalCapacityRange
// off) the allocator takes a path that costs ~1,300× more per Filter call
// on counters (kubernetes#138917).
const minMinor = 37

// statusMinor is the oldest Kubernetes 1.x whose API server authorizes a
// driver's claim-status writes per driver and node (resourceclaims/driver,
// associated-node): before it, the permission lpu-dra needs for its
// status.devices entries also rewrites any claim's allocation and
// reservations, so lpu-dra refuses to run there (hardening round 4, F4).
const statusMinor = 36

// ErrNoGranularStatus is returned by checkAPIServer for an API server
// older than 1.36.
var ErrNoGranularStatus = errors.New("no granular claim-status authorization")

// checkAPIServer returns an error wrapping ErrNoGranularStatus when the
// API server is older than 1.36, and logs a warning when it is older than
// 1.37. It asks a few times (the API server may still be coming up) and
// gives up quietly, returning nil: an API server lpu-dra cannot reach
// fails the kubelet plugin helper on its own.
func checkAPIServer(ctx context.Context, d discovery.ServerVersionInterface, log *slog.Logger) error {
	type answer struct {
		v   *version.Info
		err error
	}
	for i := range 5 {
		got := make(chan answer, 1)
		go func() { v, err := d.ServerVersion(); got <- answer{v, err} }() // not bound by ctx: never wait for it past ctx
		var a answer
		select {
		case <-ctx.Done():
			return nil
		case a = <-got:
		}
		v, err := a.v, a.err
		if err == nil {
			if unsafe, ok := olderThan(v, statusMinor); unsafe && ok {
				return fmt.Errorf("the API server is Kubernetes %s: %w there (it came in 1.%d), so the claim-status permission lpu-dra needs would let its token rewrite any claim's allocation and reservations; upgrade the control plane or use the chart's mode: devicePlugin",
					v.GitVersion, ErrNoGranularStatus, statusMinor)
			}
			if old, ok := olderThanMin(v); old {
				log.Warn(fmt.Sprintf("the API server is Kubernetes %s: DRA mode needs 1.%d or later with the default feature gates; older schedulers spend ~1,300× more per DRA Filter call on lpu-dra's arcs (kubernetes#138917)", v.GitVersion, minMinor),
					"gitVersion", v.GitVersion)
			} else if !ok {
				log.Info("cannot tell the API server's Kubernetes version", "major", v.Major, "minor", v.Minor, "gitVersion", v.GitVersion)
			}
			return nil
		}
		log.Debug("cannot read the API server version yet", "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Duration(1<<i) * time.Second):
		}
	}
	log.Warn("cannot read the API server's Kubernetes version; not checking it")
	return nil
}

// olderThanMin says whether v is a 1.x before 1.37; ok is false when v
// does not say (a vendor build with an odd minor such as "37+" counts
// by its digits).
func olderThanMin(v *version.Info) (old, ok bool) { return olderThan(v, minMinor) }

// olderThan says whether v is a 1.x before 1.minor; ok as olderThanMin.
func olderThan(v *version.Info, minor int) (old, ok bool) {
	major, err1 := strconv.Atoi(strings.TrimRight(v.Major, "+"))
	m, err2 := strconv.Atoi(strings.TrimRight(v.Minor, "+"))
	if err1 != nil || err2 != nil {
		return false, false
	}
	return major == 1 && m < minor, true
}

package daemon

import (
	"context"
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

// warnOldAPIServer logs a warning when the API server is older than 1.37.
// It asks a few times (the API server may still be coming up) and gives up
// quietly: the version is advice, never a reason not to serve.
func warnOldAPIServer(ctx context.Context, d discovery.ServerVersionInterface, log *slog.Logger) {
	for i := range 5 {
		v, err := d.ServerVersion()
		if err == nil {
			if old, ok := olderThanMin(v); old {
				log.Warn(fmt.Sprintf("the API server is Kubernetes %s: DRA mode needs 1.%d or later with the default feature gates; older schedulers spend ~1,300× more per DRA Filter call on lpu-dra's arcs (kubernetes#138917)", v.GitVersion, minMinor),
					"gitVersion", v.GitVersion)
			} else if !ok {
				log.Info("cannot tell the API server's Kubernetes version", "major", v.Major, "minor", v.Minor, "gitVersion", v.GitVersion)
			}
			return
		}
		log.Debug("cannot read the API server version yet", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(1<<i) * time.Second):
		}
	}
}

// olderThanMin says whether v is a 1.x before 1.37; ok is false when v
// does not say (a vendor build with an odd minor such as "37+" counts
// by its digits).
func olderThanMin(v *version.Info) (old, ok bool) {
	major, err1 := strconv.Atoi(strings.TrimRight(v.Major, "+"))
	minor, err2 := strconv.Atoi(strings.TrimRight(v.Minor, "+"))
	if err1 != nil || err2 != nil {
		return false, false
	}
	return major == 1 && minor < minMinor, true
}

package driver

import (
	"context"
	"maps"
	"slices"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/hyperaccel/lpu-node/internal/podresources"
)

// The telemetry series (internal/devicemetrics) carry the pod holding an
// LPU. On a DRA node that pod comes from the claims: a prepared claim's
// LPUs are held by the pods its status.reservedFor names. The checkpoint
// keeps their UIDs only (what lpu-nri admits by), so the names are kept
// here, learnt from every claim object the driver is handed (Prepare and
// SyncReservedFor); after a restart the reservation watcher's first pass
// re-reads every prepared claim and they come back.

// podName is one pod of a claim's reservedFor.
type podName struct{ uid, name string }

// rememberPods keeps the names of the pods claim is reserved for.
func (d *Driver) rememberPods(claim *resourceapi.ResourceClaim) {
	var pods []podName
	for _, r := range claim.Status.ReservedFor {
		if r.Resource == "pods" && r.UID != "" && r.Name != "" {
			pods = append(pods, podName{uid: string(r.UID), name: r.Name})
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.podNames == nil {
		d.podNames = map[string][]podName{}
	}
	d.podNames[string(claim.UID)] = pods
}

// Holders maps each held LPU to the pod holding it, for the telemetry's
// pod and namespace labels: a prepared claim's LPUs to the first (by
// name) of the pods it is reserved for whose name is known (the container
// label stays empty: a claim belongs to a pod, not to one container), and
// LPUs device-plugin pods hold (WatchDevicePlugin) to their container.
// Admin-access claims hold nothing and label nothing. It never fails: an
// LPU whose holder is unknown is left out (empty labels).
func (d *Driver) Holders(context.Context) (map[string]podresources.Holder, error) {
	claims := d.Prepared()
	d.mu.Lock()
	defer d.mu.Unlock()
	out := maps.Clone(d.dpHeld)
	if out == nil {
		out = map[string]podresources.Holder{}
	}
	for uid := range d.podNames {
		if _, ok := claims[uid]; !ok {
			delete(d.podNames, uid) // unprepared (here or by the other instance)
		}
	}
	for uid, c := range claims {
		if c.AdminAccess {
			continue
		}
		var names []string
		for _, p := range d.podNames[uid] {
			if slices.Contains(c.Pods, p.uid) {
				names = append(names, p.name)
			}
		}
		if len(names) == 0 {
			continue
		}
		h := podresources.Holder{Namespace: c.Namespace, Pod: slices.Min(names)}
		for _, id := range c.LPUs {
			out[id] = h
		}
	}
	return out, nil
}

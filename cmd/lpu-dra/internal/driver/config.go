package driver

import (
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/hyperaccel/lpu-node/cmd/lpu-dra/internal/state"
	"github.com/hyperaccel/lpu-node/pkg/inject"
)

// ReasonConfig is the refusal reason of a claim passing opaque config to
// this driver, which takes none.
const ReasonConfig = "opaque_config"

// refuseConfig refuses a claim whose allocation carries opaque config for
// this driver (from the claim or its class). The admission policy refuses
// such claims first; this catches those created before it or past it, so
// that a setting the user believes applied is never silently ignored.
func refuseConfig(claim *resourceapi.ResourceClaim) error {
	var where []string
	for _, c := range claim.Status.Allocation.Devices.Config {
		if c.Opaque == nil || c.Opaque.Driver != inject.Driver {
			continue
		}
		w := "claim"
		if c.Source == resourceapi.AllocationConfigSourceClass {
			w = "device class"
		}
		if len(c.Requests) > 0 {
			w += " (requests " + strings.Join(c.Requests, ", ") + ")"
		}
		where = append(where, w)
	}
	if len(where) == 0 {
		return nil
	}
	return state.Refuse(ReasonConfig, "driver %s takes no config, but the %s passes opaque config to it: remove it", inject.Driver, strings.Join(where, " and the "))
}

// ReasonClass is the refusal reason of a claim whose request for this
// driver's devices names a DeviceClass that is not one of ours.
const ReasonClass = "foreign_class"

// refuseClass refuses a claim whose request (or subrequest) that got one of
// our devices names a DeviceClass outside classes: the admission policies
// and the node-label prefilter key on our class names, so a catch-all
// class with a request selector on our driver would give arcs past them.
// nil classes are not checked.
func refuseClass(claim *resourceapi.ResourceClaim, classes []string) error {
	if classes == nil {
		return nil
	}
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != inject.Driver {
			continue
		}
		class, ok := requestClass(claim.Spec.Devices.Requests, r.Request)
		if !ok {
			return state.Refuse(ReasonClass, "request %q that got device %s is not in the claim's spec", r.Request, r.Device)
		}
		if !slices.Contains(classes, class) {
			return state.Refuse(ReasonClass, "request %q asks for DeviceClass %q, which is not one of this driver's (%s): ask with one of those",
				r.Request, class, strings.Join(classes, ", "))
		}
	}
	return nil
}

// requestClass is the DeviceClass of request name ("req" or
// "req/subrequest") among reqs.
func requestClass(reqs []resourceapi.DeviceRequest, name string) (string, bool) {
	base, sub, hasSub := strings.Cut(name, "/")
	for _, r := range reqs {
		if r.Name != base {
			continue
		}
		if !hasSub {
			if r.Exactly == nil {
				return "", false
			}
			return r.Exactly.DeviceClassName, true
		}
		for _, s := range r.FirstAvailable {
			if s.Name == sub {
				return s.DeviceClassName, true
			}
		}
	}
	return "", false
}

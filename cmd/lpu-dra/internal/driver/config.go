package driver

import (
	"strings"

	resourceapi "k8s.io/api/resource/v1"

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
	return refuse(ReasonConfig, "driver %s takes no config, but the %s passes opaque config to it: remove it", inject.Driver, strings.Join(where, " and the "))
}

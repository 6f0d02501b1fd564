package driver

import (
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/hyperaccel/lpu-node/config"
	"github.com/hyperaccel/lpu-node/internal/health/healthtest"
)

// withRequest gives c the spec request req: one DeviceClass (exactly), or
// subrequests name=class (firstAvailable).
func withRequest(c *resourceapi.ResourceClaim, req string, class string, subs ...[2]string) *resourceapi.ResourceClaim {
	c = c.DeepCopy()
	r := resourceapi.DeviceRequest{Name: req}
	if len(subs) == 0 {
		r.Exactly = &resourceapi.ExactDeviceRequest{DeviceClassName: class}
	}
	for _, s := range subs {
		r.FirstAvailable = append(r.FirstAvailable, resourceapi.DeviceSubRequest{Name: s[0], DeviceClassName: s[1]})
	}
	c.Spec.Devices.Requests = append(c.Spec.Devices.Requests, r)
	return c
}

// TestPrepareRefusesForeignDeviceClass: the admission policies and the
// prefilter key on the chart's DeviceClass names, so a claim that got our
// devices through another class (a catch-all class with a request selector
// on our driver) is refused (foreign_class) naming the class; our classes,
// also as a firstAvailable subrequest, prepare; a request the spec does not
// have is refused; another driver's request is not looked at.
func TestPrepareRefusesForeignDeviceClass(t *testing.T) {
	gpu := alloced{pool: "gpu", device: "gpu0", request: "gpus"}
	single := arc(4, 1)
	single.request = "lpus/singles"
	tests := map[string]struct {
		claim *resourceapi.ResourceClaim
		want  string // "" prepares
	}{
		"catch-all class": {withRequest(claim("u1", arc(0, 2)), "lpus", "everything.example.com"),
			`request "lpus" asks for DeviceClass "everything.example.com", which is not one of this driver's`},
		"arc class":      {withRequest(claim("u1", arc(0, 2)), "lpus", "lpu-arc-2.hyperaccel.ai"), ""},
		"generic class":  {withRequest(claim("u1", arc(0, 2)), "lpus", "lpu.hyperaccel.ai"), ""},
		"our subrequest": {withRequest(claim("u1", single), "lpus", "", [2]string{"arc", "lpu-arc-4.hyperaccel.ai"}, [2]string{"singles", "lpu-arc-1.hyperaccel.ai"}), ""},
		"foreign subrequest": {withRequest(claim("u1", single), "lpus", "", [2]string{"arc", "lpu-arc-4.hyperaccel.ai"}, [2]string{"singles", "everything.example.com"}),
			`request "lpus/singles" asks for DeviceClass "everything.example.com"`},
		"request not in spec":  {withRequest(claim("u1", arc(0, 2)), "other", "lpu.hyperaccel.ai"), `request "lpus" that got device ring0-start0-size2 is not in the claim's spec`},
		"other driver's class": {withRequest(withRequest(claim("u1", arc(0, 2), gpu), "lpus", "lpu.hyperaccel.ai"), "gpus", "gpu.example.com"), ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			e := &env{t: t, stateDir: t.TempDir(), cdiDir: t.TempDir() + "/cdi", devices: healthtest.New(t, healthtest.Ring(8)), classes: (&config.DRA{}).Classes()}
			e.restart()
			r := e.prepare(tc.claim)
			if tc.want == "" {
				if r.Err != nil {
					t.Fatalf("Prepare: %v", r.Err)
				}
				return
			}
			if r.Err == nil || !strings.Contains(r.Err.Error(), tc.want) {
				t.Fatalf("Prepare = %v, want refused with %q", r.Err, tc.want)
			}
			if got := counter(t, e.metrics, MetricRefusals, ReasonClass); got != 1 {
				t.Fatalf("refusals{reason=%s} = %v, want 1", ReasonClass, got)
			}
			if len(e.d.Prepared()) != 0 {
				t.Fatalf("refused claim prepared: %v", e.d.Prepared())
			}
		})
	}
}

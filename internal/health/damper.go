package health

import "github.com/hyperaccel/lpu-node/pkg/device"

// damper decides which health to report for each device from a sequence of
// raw probes. A reported state flips only after failureThreshold (to
// unhealthy) or recoveryThreshold (to healthy) consecutive probes that
// disagree with it; one agreeing probe resets the count. It holds no clock:
// the monitor spaces the probes.
type damper struct {
	failureThreshold  int
	recoveryThreshold int
	state             map[string]*damped
}

type damped struct {
	reported device.Health
	streak   int // consecutive probes disagreeing with reported.Healthy
}

func newDamper(failureThreshold, recoveryThreshold int) *damper {
	return &damper{
		failureThreshold:  max(failureThreshold, 1),
		recoveryThreshold: max(recoveryThreshold, 1),
		state:             make(map[string]*damped),
	}
}

// observe records one raw probe of id and returns the health to report and
// whether a flip is pending (more probes are needed to confirm it). The
// first probe of a device is reported as it is.
func (d *damper) observe(id string, raw device.Health) (reported device.Health, pending bool) {
	s, ok := d.state[id]
	if !ok {
		d.state[id] = &damped{reported: raw}
		return raw, false
	}
	if raw.Healthy == s.reported.Healthy {
		s.streak = 0
		s.reported.Reason = raw.Reason // the same verdict may change its reason
		return s.reported, false
	}
	s.streak++
	need := d.recoveryThreshold
	if s.reported.Healthy {
		need = d.failureThreshold
	}
	if s.streak >= need {
		s.reported, s.streak = raw, 0
		return s.reported, false
	}
	return s.reported, true
}

// forget drops a device that is gone.
func (d *damper) forget(id string) { delete(d.state, id) }

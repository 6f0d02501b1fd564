package state

import "fmt"

// Refusal reasons, the label values of lpu_dra_prepare_refusals_total.
const (
	ReasonForeignPool = "foreign_pool"
	ReasonBadDevice   = "unknown_device"
	ReasonUnhealthy   = "unhealthy"
	ReasonHeld        = "held"
	ReasonNotReady    = "not_ready"
	ReasonWrite       = "write_failed"
	ReasonChanged     = "allocation_changed"
)

// Refusal is a Prepare error with its metric reason.
type Refusal struct {
	Reason string
	err    error
}

func (r *Refusal) Error() string { return r.err.Error() }
func (r *Refusal) Unwrap() error { return r.err }

// Refuse is a Refusal for reason, its message formatted as fmt.Errorf's.
func Refuse(reason, format string, args ...any) *Refusal {
	return &Refusal{Reason: reason, err: fmt.Errorf(format, args...)}
}

package config

import "time"

// Security holds the fail-closed knobs of lpu-nri (docs/security.md).
type Security struct {
	// AcceptLegacySeals accepts allocations sealed in the v1 form (no node
	// binding, allocation ID optional) that device plugins before node
	// binding wrote. A migration aid for the upgrade window only: kubelet
	// replays checkpointed annotations on container restart. Default false.
	AcceptLegacySeals bool `json:"acceptLegacySeals"`
	// AuditInterval is how often lpu-nri audits the running containers
	// against their allocations (besides at Synchronize). Default 30s.
	AuditInterval Duration `json:"auditInterval"`
}

// DefaultAuditInterval is Security.AuditInterval's default.
const DefaultAuditInterval = 30 * time.Second

// MinAuditInterval bounds the audit's cost: it lists every container.
const MinAuditInterval = time.Second

func (s *Security) applyDefaults() {
	setDuration(&s.AuditInterval, DefaultAuditInterval)
}

func (s *Security) validate(v *validator) {
	if d := s.AuditInterval.Duration; d < MinAuditInterval {
		v.add("security.auditInterval", d.String(), "must be at least %s", MinAuditInterval)
	}
}

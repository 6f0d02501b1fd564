package config

import (
	"fmt"
	"regexp"
	"slices"
	"time"
)

// Security holds the fail-closed knobs of lpu-nri (docs/security.md).
type Security struct {
	// AuditInterval is how often lpu-nri audits the running containers
	// against their allocations (besides at Synchronize). Default 30s.
	AuditInterval Duration `json:"auditInterval"`
	// AllowNamespaces lists the namespaces whose containers may carry LPU
	// device nodes without an allocation: node agents that run privileged
	// (containerd gives a privileged container every host device). Any
	// other such container is refused. Default [kube-system]; an empty
	// list allows none.
	AllowNamespaces []string `json:"allowNamespaces"`
	// RuntimeGuard makes every LPU container of the device plugin carry a
	// CDI device (hyperaccel.ai/lpu-guard=verified) whose createRuntime
	// hook, "lpu-nri guard", refuses to start a container lpu-nri did not
	// verify: the runtime lost or timed out lpu-nri and created it bare, as
	// containerd before 2.2 (no NRI validator) does. Both daemons must see
	// the same value, lpu-nri must be able to write cdi.specDir, and the
	// runtime must have CDI on. Default false.
	RuntimeGuard bool `json:"runtimeGuard"`
}

// DefaultAllowNamespaces is Security.AllowNamespaces' default: privileged
// system agents (kube-proxy, CNI) run there and must keep starting.
var DefaultAllowNamespaces = []string{"kube-system"}

// DefaultAuditInterval is Security.AuditInterval's default.
const DefaultAuditInterval = 30 * time.Second

// MinAuditInterval bounds the audit's cost: it lists every container.
const MinAuditInterval = time.Second

func (s *Security) applyDefaults() {
	setDuration(&s.AuditInterval, DefaultAuditInterval)
	if s.AllowNamespaces == nil {
		s.AllowNamespaces = slices.Clone(DefaultAllowNamespaces)
	}
}

func (s *Security) validate(v *validator) {
	if d := s.AuditInterval.Duration; d < MinAuditInterval {
		v.add("security.auditInterval", d.String(), "must be at least %s", MinAuditInterval)
	}
	for i, ns := range s.AllowNamespaces {
		if len(ns) > 63 || !dnsLabel.MatchString(ns) {
			v.add(fmt.Sprintf("security.allowNamespaces[%d]", i), ns, "is not a namespace name (a DNS label)")
		}
	}
}

var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// Package devcgroup evaluates a container's device cgroup rules (OCI
// linux.resources.devices): which accesses they admit to a character
// device. The device cgroup, not the device nodes in the spec, decides what
// a container can open; with CAP_MKNOD (in containerd's default
// capabilities) a container can make any node its rules admit.
//
// Rules apply in order. A rule of type "a" (or no type) resets the policy to
// allow-all or deny-all whatever its numbers; other rules add or remove an
// exception, a nil major or minor matching any. With no rule nothing is
// admitted, as in runc's cgroup v2 device filter.
//
// Kernels and runtimes differ on a rule that punches a hole in a wildcard
// (allow c 509:* then deny c 509:3): cgroup v1 keeps the wildcard, the
// eBPF filters let the later rule win, runc refuses the spec. Admitted
// returns what any of them would admit, so a caller that refuses admitted
// devices fails closed:
//
//	rules := []devcgroup.Rule{{Allow: false, Access: "rwm"}, {Allow: true, Type: "c", Major: ptr(509), Access: "rw"}}
//	devcgroup.Admitted(rules, 509, 3) // Read|Write
package devcgroup

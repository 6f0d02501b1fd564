// Package driver is lpu-dra's kubelet DRA plugin: it publishes the node's
// ring arcs (pkg/arcslice) in the order pkg/alloc would pick them now,
// prepares and unprepares claims, and reports per-device health.
//
// Prepare resolves each allocated device of our driver and pool into LPU
// IDs, refuses an unknown, unhealthy or already held LPU (naming it), and
// writes one CDI spec per claim (pkg/inject ClaimSpec, kind
// lpu.hyperaccel.ai/claim, device = claim UID) into the CDI dir before it
// records the claim in the checkpoint (package checkpoint). A repeated
// Prepare returns the recorded answer. Unprepare removes the spec, then the
// entry; an unknown claim is not an error. At start the driver rewrites
// the spec of every checkpointed claim whose file is missing and removes
// claim specs no entry names, so a crash between the two steps heals.
//
// After every change of the held LPUs or of device health the driver
// republishes its slices: arcs holding an unhealthy LPU carry a NoSchedule
// taint (see pkg/arcslice), and the free arcs pkg/alloc prefers come first.
package driver

// Package state is lpu-dra's node state: the prepared claims in the
// checkpoint (package dracheckpoint), the per-claim CDI specs beside it,
// and the two kept in step. Every change goes through one lock: the state
// dir's checkpoint lock (held across processes, so the other pod of a
// rolling update waits) and, inside it, the mutex over the last state
// this instance read.
//
// Prepare resolves a claim's arcs into LPU IDs, refuses an unknown,
// unhealthy or already held LPU (naming it), and writes one CDI spec per
// claim (pkg/inject ClaimSpec, kind lpu.hyperaccel.ai/claim, device =
// claim UID) into the CDI dir before it records the claim in the
// checkpoint. A repeated Prepare returns the recorded claim. Unprepare
// removes the spec, then the entry; an unknown claim is not an error.
// Heal, at start, rewrites the spec of every checkpointed claim whose file
// is missing and removes claim specs no entry names, so a crash between
// the two steps heals.
package state

// Package ledger records, in lpu-nri's state directory, which pod first
// used each allocation ID, so a sealed allocation copied into another pod
// is refused: the device plugin makes a fresh ID for every container
// allocation, and only the pod it was made for (its containers' restarts,
// its init and app containers) may present it again.
//
// # On disk
//
// Two files: allocations.json, the snapshot (version 1, the format older
// lpu-nri wrote and still read), and allocations.log, one JSON line per
// new ID (with the IDs its arrival evicted), appended and fsynced before
// Claim returns, so a new ID costs one small append, not a rewrite of the
// whole ledger. Compaction writes the snapshot through atomicfile and
// empties the log: at Open, after MaxEntries appended lines, and when
// Prune drops IDs. A torn last line (a crash in the middle of an append,
// whose Claim never returned) is ignored. An old allocations.json without
// a log is loaded as it is (the upgrade). Both files and the directory
// get the seal key's owner and mode checks (internal/statedir).
//
// # Bounds and liveness
//
// The ledger holds at most MaxEntries IDs. It knows which pods are live:
// Claim and Seed mark the pod, Prune (the runtime's full list at
// Synchronize) replaces the set, PodGone (RemovePodSandbox) unmarks one.
// At the cap, a new ID evicts the least recently seen ID of a pod that is
// not live; an ID of a live pod is never evicted. When every entry is a
// live pod's, Claim refuses the new ID with ErrFull (fail closed): a
// tenant churning pods cannot flush a running pod's ID and replay its
// annotation. Prune drops IDs whose pod has been gone for Retention.
package ledger

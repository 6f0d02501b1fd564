// Package ledger records, in lpu-nri's state directory, which pod first
// used each allocation ID, so a sealed allocation copied into another pod
// is refused: the device plugin makes a fresh ID for every container
// allocation, and only the pod it was made for (its containers' restarts,
// its init and app containers) may present it again.
//
// # On disk
//
// allocations.json, the snapshot (version 1, the format older lpu-nri
// wrote and still read; it names the generation of the log that follows
// it), and allocations.wal, the write-ahead log: a zero-filled file of
// fixed size, so that writing a batch in place and fdatasyncing it
// changes no metadata (no journal commit, wal.go). Each new ID is one
// CRC-framed batch (with the IDs its arrival evicted); a torn last batch
// (a crash mid-write, whose Claim never returned) is ignored, damage
// before an intact batch is an error. Compaction writes the snapshot
// through atomicfile and swaps in an empty log of the next generation: at
// Open, after MaxEntries batches, and when Prune drops IDs; a log older
// than the snapshot is ignored. The previous layout (allocations.json
// plus allocations.log, JSON lines) is loaded and folded at Open.
// sandboxes.json (version 1) holds the pod sandboxes seen stopped and not
// yet removed, by sandbox ID with their pod's UID, written through
// atomicfile. Every file and the directory get the seal key's owner and
// mode checks (internal/statedir).
//
// # Durability
//
// Claim returns once its batch is written to the log, within
// microseconds: the kernel holds it, so a crash or restart of lpu-nri
// loses nothing, and a background fdatasync (one for every batch written
// meanwhile: group commit) starts at once. What a node crash could still
// lose is made durable before any container can use it: SyncPod, which
// NRI StartContainer runs before the runtime starts the container, waits
// for the pod's records and fails (the start fails) when they cannot be
// synced. A crash before that loses the claim of a container that never
// ran, as a crash before CreateContainer would. SyncOnClaim makes Claim
// itself wait for its fdatasync. A sandbox's stop is written in the
// background, milliseconds later, and by Close: a stop lost to a crash
// in between leaves its pod live until the sandbox is removed.
//
// # Bounds and liveness
//
// The ledger holds at most MaxEntries IDs, a pod at most MaxPerPod and a
// namespace at most MaxPerNamespace: a pod past its share is refused
// (ErrShare), a namespace at its share evicts its own oldest evictable ID
// first, so one tenant cannot keep others out. A pod is live while
// one of its sandboxes runs, and NRI gives a sandbox no state (the
// runtime lists stopped sandboxes too, until their pod is deleted), so
// the ledger keeps what the runtime told it: Claim and Seed mark the
// presenting sandbox running; Stopped (StopPodSandbox, kept in
// sandboxes.json across restarts) and Removed (RemovePodSandbox) unmark
// it; Prune (the runtime's full list at Synchronize) replaces the set
// with the listed sandboxes that run a container or were not seen to
// stop. Idle (StopContainer) marks an ID whose container stopped. At the cap, a new ID evicts the least recently seen
// ID of a pod that is not live, then, with EvictIdle (set only with the
// PodResources cross-check, which refuses a replay on its own), the least
// recently seen idle ID; the ID of a running container is never evicted.
// When nothing can be evicted, Claim refuses the new ID with ErrFull (fail
// closed), naming the biggest holders: a tenant churning pods cannot flush
// a running pod's ID and replay its annotation. Prune drops IDs whose pod
// has been gone for Retention.
package ledger

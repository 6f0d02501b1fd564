// Package dracheckpoint keeps lpu-dra's prepared claims on disk, so that a
// restarted driver still knows them: which LPUs each claim holds, and the
// CDI device it returned. The kubelet may unprepare a claim in a later
// process than the one that prepared it.
//
// The file (<state-dir>/dra-checkpoint.json) is versioned JSON, written
// atomically (temp file, fsync, rename, fsync of the directory), so a crash
// leaves either the old or the new content. Parse is strict: an unknown
// version, unknown fields, an entry without a UID, an LPU ID that is not
// lpuN, or an LPU held by two claims is an error naming the entry.
//
// Writers hold Acquire's lock (a flock on <state-dir>/dra-checkpoint.lock)
// around each read-modify-write: during a rolling update two lpu-dra pods
// share the directory, and each must see the other's last write. Every hold
// is appended to <state-dir>/dra-lock.log (holder, operation, times), from
// which Overlap tells whether two holds ever coincided. Readers (lpu-nri)
// need no lock: a save replaces the file by rename.
package dracheckpoint

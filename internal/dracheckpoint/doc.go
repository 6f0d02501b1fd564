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
package dracheckpoint

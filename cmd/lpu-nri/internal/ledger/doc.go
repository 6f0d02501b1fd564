// Package ledger records, in lpu-nri's state directory, which pod first
// used each allocation ID, so a sealed allocation copied into another pod
// is refused: the device plugin makes a fresh ID for every container
// allocation, and only the pod it was made for (its containers' restarts,
// its init and app containers) may present it again.
//
// The file is rewritten atomically (temp file, fsync, rename) on every new
// ID, holds at most MaxEntries IDs (the least recently seen go first), and
// Prune drops IDs whose pod has been gone for Retention.
package ledger

// Package atomicfile owns the node stack's one durable write: every file a
// daemon writes for later (CDI specs, the DRA checkpoint, the replay
// ledger's snapshot, the seal key, the NFD feature file, devicesim's
// trees) goes through it, so a crash or a full disk leaves either the old
// file or the new one, never a mix, and a write the caller was told
// succeeded survives a power cut.
//
// Write replaces a file:
//
//  1. a temp file in the target's directory (so the rename cannot cross
//     file systems), named ".<name>.*.tmp";
//  2. mode (WithMode, default 0600) and owner (WithOwner) set on the temp
//     file, so the target never appears with the wrong ones;
//  3. the bytes written and fsynced;
//  4. the optional check (WithVerify) run on the complete temp file: the
//     CDI spec writers let the CDI library read and validate exactly the
//     bytes about to become the spec;
//  5. rename over the target, then fsync of the directory, so the new name
//     is durable too.
//
// On any failure before the rename the temp file is removed and the
// target is untouched. A failing directory fsync is reported, but the new
// content is then already in place.
//
// WithoutSync keeps the atomic rename and drops both fsyncs, for trees
// that stand in for sysfs (devicesim's): a reboot does not keep
// those either.
//
// Create is Write for a file that must not be replaced (the seal key): the
// temp file is hard-linked to the target, and an existing target is an
// error wrapping fs.ErrExist. Symlink replaces a symbolic link the same
// way.
//
//	err := atomicfile.Write(path, data, atomicfile.WithMode(0o644))
package atomicfile

// Package statedir owns the trust checks on the daemons' state directory
// (/var/lib/lpu) and on the files in it that decide who gets an LPU: the
// seal key, the replay ledger and the DRA checkpoint. Whoever can replace
// one of them can forge or replay allocations, so each must be the
// daemon's own: a directory owned by the daemon's effective uid that group
// and others cannot write (a symlinked directory is resolved and its
// target checked), and files that are regular, owned by that uid, with no
// group or other permission bits and exactly one link.
//
//	dir, err := statedir.Check(stateDir) // the resolved directory
//	f, err := statedir.Open(filepath.Join(dir, "seal.key"))
package statedir

package ledger

// SyncOnClaim makes Claim return only once its record is on disk (one
// fdatasync per Claim, shared by concurrent Claims), instead of once it is
// in the log and before SyncPod: the old durability, kept for the crash
// tests and the benchmark's ack=synced case.
func SyncOnClaim() Option { return func(l *Ledger) { l.syncOnClaim = true } }

// only lists the pods in live as running, each in its one sandbox (""),
// the one Claim and Seed mark for a Holder without a Sandbox.
func only(live map[string]bool) []Sandbox {
	var out []Sandbox
	for pod, ok := range live {
		if ok {
			out = append(out, Sandbox{Pod: pod})
		}
	}
	return out
}

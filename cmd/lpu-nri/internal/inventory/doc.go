// Package inventory keeps lpu-nri's view of the node's LPUs: an immutable
// Snapshot behind an atomic pointer, refreshed by a background loop (a
// ticker, plus Kick on demand), so the CreateContainer path reads it without
// locks or disk I/O.
//
//	store := inventory.New(device.NewSysfs("/"), inventory.Options{Interval: 5 * time.Second})
//	if _, err := store.Refresh(ctx); err != nil { ... }
//	go store.Run(ctx)
//	d, ok := store.Load().Device("lpu3")
package inventory

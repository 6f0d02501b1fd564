// Package nfd writes the Node Feature Discovery local feature file that
// lets platforms select LPU nodes by label: device count, ring layout,
// model, driver and firmware versions (Features), written atomically and
// only when its content changes (Write), headed by an expiry so NFD drops
// the labels when the writer is gone (Expiring, Lifetime, Refresh). The
// allocator serving the node writes it, lpu-device-plugin or lpu-dra, with
// the same flag (Flag: --nfd-features-file, its default by mode) and the same loop
// (Keep), so the labels do not depend on the mode.
//
//	lines := nfd.Expiring(nfd.Features("hyperaccel.ai/lpu", inv), time.Now().Add(nfd.Lifetime))
//	changed, err := nfd.Write(nfd.DefaultPath, lines)
//
//	path := opts.NFD.Path(root, log) // startup.DeclareNFD declared the flag
//	go nfd.Keep(ctx, monitor, path, cfg.ResourceName, log)
package nfd

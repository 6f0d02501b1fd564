// Package nfd writes the Node Feature Discovery local feature file that
// lets platforms select LPU nodes by label: device count, ring layout,
// model, driver and firmware versions (Features), written atomically and only when
// its content changes (Write), headed by an expiry so NFD drops the labels
// when the writer is gone (Expiring, Lifetime, Refresh).
//
//	lines := nfd.Expiring(nfd.Features("hyperaccel.ai/lpu", inv), time.Now().Add(nfd.Lifetime))
//	changed, err := nfd.Write(nfd.DefaultPath, lines)
package nfd

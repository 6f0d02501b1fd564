// Package nfd writes the Node Feature Discovery local feature file that
// lets platforms select LPU nodes by label: device count, ring layout,
// model, driver and firmware versions (Features), written atomically and only when
// its content changes (Write).
//
//	changed, err := nfd.Write(nfd.DefaultPath, nfd.Features("hyperaccel.ai/lpu", inv))
package nfd

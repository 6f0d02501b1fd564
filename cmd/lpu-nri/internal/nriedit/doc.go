// Package nriedit renders pkg/inject's container edits as the NRI
// adjustment lpu-nri returns at CreateContainer.
//
// It lives under cmd/lpu-nri so that lpu-nri alone links the NRI API (and
// the WebAssembly runtime the NRI module brings along): pkg/inject, which
// the device plugin, lpu-dra and kubectl-lpu import, keeps the edits
// model and its CDI rendering only.
//
//	edits := inject.ForDevices(devs, inv.DriverVersion, opts)
//	adj := nriedit.Adjustment(edits) // *api.ContainerAdjustment
//
// A golden test renders one device set both ways, to NRI here and to CDI
// through pkg/inject (checked against pkg/inject's own golden spec), and
// applies both to an OCI spec, so the two renderings cannot drift apart.
package nriedit

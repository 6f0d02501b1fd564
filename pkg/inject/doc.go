// Package inject owns what a container holding LPUs gets, and the contract
// that tells the runtime side which LPUs those are.
//
// # One model, two renderers
//
// ForDevices builds Edits (device nodes, read-only bind mounts, env) for a
// set of devices in ring order. Edits.Adjustment renders them for NRI
// (lpu-nri at CreateContainer); Spec renders the node's whole inventory as
// a CDI spec for runtimes without NRI, from the same helpers, so the two
// cannot drift (a golden test renders one set both ways and compares).
//
//	edits := inject.ForDevices(devs, inv.DriverVersion, inject.Options{
//		Mounts: []inject.Mount{{HostPath: "/usr/lib/lpu"}},
//	})
//	adj := edits.Adjustment() // *api.ContainerAdjustment
//
// A container without a valid allocation gets Unallocated(): no nodes and
// LPU_VISIBLE_DEVICES=none, which overrides whatever the image sets.
// ExistingMounts drops configured mounts whose host path is missing, since
// a bind mount of a missing source fails the container.
//
// In CDI mode (Spec, WriteSpec, CDIDeviceNames) no CDI device sets
// LPU_VISIBLE_DEVICES: CDI replaces same-key env per device, so the device
// plugin returns it for the whole set as a plain env (VisibleDevices).
//
// # The annotation contract
//
// The device plugin's Allocate returns two container annotations:
//
//	lpu.hyperaccel.ai/devices: lpu7,lpu0,lpu1   (IDs in ring order, arc start first)
//	lpu.hyperaccel.ai/seal:    v1:<64 hex digits>
//
// The seal is HMAC-SHA256 over "lpu.hyperaccel.ai/devices=" + value with a
// 32-byte node-local key (LoadOrCreateKey: <stateDir>/seal.key, mode 0600,
// created once, shared by both daemons). Open verifies the seal in constant
// time before parsing the value strictly (ParseIDs). Anything added to the
// contract later (an allocation ID for tracing, say) must be covered by the
// seal too, or lpu-nri must not trust it.
//
//	key, err := inject.LoadOrCreateKey("/var/lib/lpu")
//	ann := key.Annotations([]string{"lpu7", "lpu0", "lpu1"}) // device plugin
//	ids, err := key.Open(containerAnnotations)             // lpu-nri
//	if errors.Is(err, inject.ErrNoAllocation) { /* Unallocated() */ }
//
// Trust decisions about pod annotations belong to lpu-nri; HasReservedKey
// finds a contract key where none may be.
package inject

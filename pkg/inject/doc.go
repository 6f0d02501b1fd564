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
// time before parsing the value strictly (ParseIDs).
//
//	key, err := inject.LoadOrCreateKey("/var/lib/lpu")
//	ann := key.Annotations([]string{"lpu7", "lpu0", "lpu1"}) // device plugin
//	ids, err := key.Open(containerAnnotations)             // lpu-nri
//	if errors.Is(err, inject.ErrNoAllocation) { /* Unallocated() */ }
//
// # Allocation IDs
//
// For tracing, AnnotationsWithID adds two more keys: a random allocation ID
// (NewAllocationID, 32 lower-case hex digits) and a seal binding that ID to
// the devices value:
//
//	lpu.hyperaccel.ai/allocation:      5f0e8a1c2b3d4e5f60718293a4b5c6d7
//	lpu.hyperaccel.ai/allocation-seal: v1:<HMAC of "lpu.hyperaccel.ai/allocation=" + ID + "\n" + "lpu.hyperaccel.ai/devices=" + value>
//
// OpenAllocation verifies both seals and returns the IDs and the allocation
// ID. A forged ID, or an ID and seal copied from another container's
// allocation, is refused with ErrBadSeal like a forged devices value.
// Annotations written before allocation IDs existed (kubelet replays its
// checkpoint after an upgrade) carry neither key and open with ID "".
// The devices value and its seal are unchanged, so an lpu-nri without
// allocation IDs (a rollback) still opens new annotations; Open ignores the
// allocation keys.
//
//	allocID := inject.NewAllocationID()
//	ann, err := key.AnnotationsWithID(ids, allocID)  // device plugin
//	alloc, err := key.OpenAllocation(annotations)    // lpu-nri: alloc.IDs, alloc.ID
//
// Trust decisions about pod annotations belong to lpu-nri; HasReservedKey
// finds a contract key where none may be.
package inject

// Package inject owns what a container holding LPUs gets, and the contract
// that tells the runtime side which LPUs those are.
//
// # One model, two renderers
//
// ForDevices builds Edits (device nodes, read-only bind mounts, env) for a
// set of devices in ring order. lpu-nri renders them as an NRI adjustment
// at CreateContainer (cmd/lpu-nri/internal/nriedit, so that no other
// binary links the NRI API); Spec renders the node's whole inventory as a
// CDI spec for runtimes without NRI, from the same helpers, so the two
// cannot drift (nriedit's golden test renders one set both ways and
// compares, against this package's golden CDI spec).
//
//	opts := inject.Options{Mounts: []inject.Mount{{HostPath: "/usr/lib/lpu"}}}
//	edits := inject.ForDevices(devs, inv.DriverVersion, opts) // lpu-nri: nriedit.Adjustment(edits)
//	spec, err := inject.Spec(inv, opts)                       // CDI mode: inject.WriteSpec(dir, spec)
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
// The device plugin's Allocate returns four container annotations:
//
//	lpu.hyperaccel.ai/devices:         lpu7,lpu0,lpu1   (IDs in ring order, arc start first)
//	lpu.hyperaccel.ai/seal:            v2:<HMAC of node and devices value>
//	lpu.hyperaccel.ai/allocation:      5f0e8a1c2b3d4e5f60718293a4b5c6d7 (random, per allocation)
//	lpu.hyperaccel.ai/allocation-seal: v2:<HMAC of node, allocation ID and devices value>
//
// The seals are HMAC-SHA256 with a 32-byte node-local key (LoadOrCreateKey:
// <stateDir>/seal.key, mode 0600, owned by the daemon, one link, in a state
// dir only its owner can write; created once, shared by both daemons) over
// "lpu.hyperaccel.ai/node=" + node + "\n" then "lpu.hyperaccel.ai/devices=" +
// value, or "lpu.hyperaccel.ai/allocation=" + ID + "\n" +
// "lpu.hyperaccel.ai/devices=" + value. The node name (ForNode)
// keeps annotations sealed on one node from opening on another that shares
// its key (cloned images; Fingerprint tells them apart). OpenAllocation
// verifies the seals in constant time before parsing the value strictly
// (ParseIDs).
//
//	key, err := inject.LoadOrCreateKey("/var/lib/lpu")
//	key, err = key.ForNode(nodeName)
//	ann, err := key.AnnotationsWithID(ids, inject.NewAllocationID()) // device plugin
//	alloc, err := key.OpenAllocation(containerAnnotations)         // lpu-nri
//	if errors.Is(err, inject.ErrNoAllocation) { /* Unallocated() */ }
//
// A forged ID, or an ID and seal copied from another container's
// allocation or another node, is refused with ErrBadSeal like a forged
// devices value.
//
// # Where the seals live
//
// seal.go holds every MAC input (a table of them heads it), the one writer
// (AnnotationsWithID) and the one opener (OpenAllocation; Open is its first
// half), so lpu-nri's Decide reads the whole check in one file;
// annotation.go holds the keys and the syntax of their values.
//
// # The legacy form
//
// Device plugins before node binding wrote v1 seals ("v1:", no node), with
// or without the allocation ID keys. Open and OpenAllocation refuse them
// with an error wrapping ErrLegacySeal and ErrBadSeal: a container whose
// checkpointed annotations still carry one is refused until its pod is
// recreated. Tests make them with injecttest.
//
// Trust decisions about pod annotations belong to lpu-nri; HasReservedKey
// finds a contract key where none may be.
package inject

// Package plugin is lpu-nri's NRI plugin: it verifies the allocation the
// device plugin sealed into a container's annotations and turns it into a
// container adjustment (device nodes, read-only driver mounts,
// LPU_VISIBLE_DEVICES in ring order), or refuses the container with an
// error saying why. Runner keeps it connected to the runtime, reconnecting
// with bounded backoff, and drives the readiness signal.
//
// # Trust rules, in order
//
//  1. Any lpu.hyperaccel.ai/ key, in any letter case, in the pod
//     annotations refuses the container (runtimes copy pod annotations into
//     containers).
//  2. An env that sets LPU_VISIBLE_DEVICES more than once (image and pod
//     spec) refuses the container: the runtime would keep the last copy
//     over lpu-nri's value.
//  3. The allocation is read from the container annotations only; its v2
//     seals must verify with the node key and node name (v1 only behind
//     security.acceptLegacySeals). No allocation: no devices and
//     LPU_VISIBLE_DEVICES=none, overriding the image (NRI v0.12 drops env
//     removals).
//  4. Each ID must be in the current inventory and healthy. An unhealthy
//     device refuses the container: the workload would fail obscurely on
//     it, while a refusal shows the reason in the pod's events and clears
//     once the device recovers (kubelet retries creation).
//  5. Optionally kubelet's PodResources must report the same IDs.
//  6. LPU nodes the container already carries (by device number; types c,
//     u and none) beyond its allocation refuse it, and so do device cgroup
//     rules admitting an LPU beyond it (cgroup.go, cmd/lpu-nri/internal/devcgroup),
//     outside security.allowNamespaces.
//  7. The allocation ID must be new or the same pod's (the ledger in the
//     state dir): a sealed allocation copied into another pod is refused.
//
// A container whose CDI devices name lpu-dra claims
// (lpu.hyperaccel.ai/claim=<uid>) takes rule 1, then instead of 3 to 7:
// every claim must be in lpu-dra's checkpoint as prepared for the pod, and
// its LPUs (from the checkpoint, known and healthy in the inventory) are
// the container's verified allocation for rule 6, the validator and the
// audit. Nothing is added: the runtime applied the claims' CDI specs.
//
// # Validator and audit
//
// On runtimes with NRI validators (containerd >= 2.2) the plugin also
// validates every container's merged adjustment: its final LPU nodes, by
// device number, must equal its verified allocation and its final device
// cgroup rules may admit no other LPU (validate.go). The
// audit (at Synchronize and every security.auditInterval, over the
// containers tracked from lifecycle events) counts containers holding LPU
// nodes, or rules admitting LPUs, without an allocation and containers running without the LPUs they
// were allocated (audit.go).
//
// Apart from the optional cross-check and reading lpu-dra's checkpoint for
// claim containers the decision does no I/O: the inventory is an atomic
// snapshot refreshed in the background.
//
//	p, _ := plugin.New(plugin.Config{Key: key, Store: store, Ready: readySrv})
//	r := &plugin.Runner{Plugin: p, Name: "lpu", Index: "10", Socket: "/var/run/nri/nri.sock"}
//	err := r.Run(ctx) // returns when ctx is done
package plugin

// Package verify holds lpu-nri's trust rules: what decides whether a
// container gets LPUs, which ones, or why it is refused. It knows the NRI
// API's container and pod types but not the NRI stub, the runtime
// connection or the metrics registry (cmd/lpu-nri/internal/plugin adapts
// it to the runtime and counts what it decides).
//
// # Trust rules, in order (Decide)
//
// This is the one list of the rules: docs/trust-model.md and
// docs/security.md refer to them by name. Each rule is one function
// (rules.go), named here, which Decide calls in this order; its Refusal
// is the rule's error under errors.Is and carries the reason named here
// (the reason label of lpu_nri_refusals_total).
//
//  1. Pod annotations (checkPodAnnotations, ErrPodAnnotations). Any
//     lpu.hyperaccel.ai/ key, in any letter case, in the pod annotations
//     refuses the container: runtimes copy pod annotations into
//     containers, so a pod could claim LPUs. [ReasonPodAnnotation]
//  2. One LPU_VISIBLE_DEVICES (checkOneVisibleDevices,
//     ErrOneVisibleDevices). An env that sets LPU_VISIBLE_DEVICES more
//     than once (image and pod spec) refuses the container: the
//     runtime's env adjustment replaces only the first copy and then
//     writes the last one over lpu-nri's value. [ReasonBadValue]
//  3. Sealed allocation (checkSealedAllocation, ErrSealedAllocation).
//     The allocation is read from the container annotations only; its v2
//     seals must verify with the node key and node name (a v1 seal is a
//     bad seal). No allocation: no devices and LPU_VISIBLE_DEVICES=none,
//     overriding the image (NRI v0.12 drops env removals).
//     [ReasonBadSeal, ReasonBadValue]
//  4. Known, healthy LPUs (checkKnownHealthy, ErrKnownHealthy). Each ID
//     must be in the current inventory and healthy; nodes, majors and
//     minors come from discovery. An unhealthy device refuses the
//     container: the workload would fail obscurely on it, while a
//     refusal shows the reason in the pod's events and clears once the
//     device recovers (the kubelet retries creation).
//     [ReasonNoInventory, ReasonUnknownDevice, ReasonUnhealthyDevice]
//  5. PodResources agree (checkPodResources, ErrPodResources).
//     Optionally the kubelet's PodResources must report the same IDs.
//     [ReasonPodResources]
//  6. No other LPU (checkNoOtherLPU, ErrNoOtherLPU). LPU nodes the
//     container already carries (by device number; types c, u and none)
//     beyond its allocation refuse it, and so do device cgroup rules
//     admitting an LPU beyond it (cgroup.go,
//     cmd/lpu-nri/internal/devcgroup), outside security.allowNamespaces.
//     [ReasonUnallocatedNodes, ReasonDeviceCgroup]
//  7. Replay ledger (checkReplayLedger, ErrReplayLedger). The allocation
//     ID must be new or the same pod's (the ledger in the state dir): a
//     sealed allocation copied into another pod is refused, and so is an
//     ID past its pod's or namespace's share of the ledger.
//     [ReasonReplayed]
//
// Prepared claims (checkPreparedClaims, ErrPreparedClaims). A container
// whose CDI devices name lpu-dra claims (lpu.hyperaccel.ai/claim=<uid>)
// takes Pod annotations and One LPU_VISIBLE_DEVICES, then instead of Sealed
// allocation to Replay ledger: every claim must be in lpu-dra's checkpoint
// as prepared for the pod (waiting up to ClaimWait for a pod lpu-dra has
// not recorded yet) [ReasonBadValue], and its LPUs must be known and
// healthy (Known, healthy LPUs); they are then the container's verified
// allocation for No other LPU, the validator and the audit. Nothing is
// added: the runtime applied the claims' CDI specs.
//
// # Validator and audit
//
// Validate (on runtimes with NRI validators, containerd >= 2.2) checks a
// container's merged adjustment, the one other plugins may have changed.
// Each check is one function (validate.go), named here, which Validate
// calls in this order; its Refusal is the error named here under
// errors.Is and carries the reason named here.
//
//  1. Inventory (validateInventory). Without an inventory nothing is known
//     to be an LPU and no other check runs: a container with an allocation
//     (sealed or claims) is refused, the others pass (a node whose driver
//     is not loaded still runs its CNI and agents). [ErrKnownHealthy,
//     ReasonNoInventory]
//  2. No LPU CDI device (validateNoLPUCDIDevices). No plugin may add a CDI
//     device of this project's kind or an lpu-dra claim's.
//     [ErrPluginCDIDevice, which is also ErrFinalDevices; ReasonMismatch]
//  3. Final LPU nodes (validateFinalNodes). The container's final LPU
//     nodes, by device number, must equal its verified allocation (the
//     sealed annotation's, or its prepared claims' LPUs, all known and
//     healthy; none when they do not verify); in security.allowNamespaces
//     it may hold more. [ErrFinalDevices, ReasonMismatch]
//  4. Final device cgroup (validateFinalCgroup). Its final device cgroup
//     rules may admit no LPU beyond that allocation, outside
//     security.allowNamespaces. [ErrNoOtherLPU, ReasonDeviceCgroup]
//
// Audit judges a running container for the periodic audit
// (cmd/lpu-nri/internal/audit): LPUs held (nodes or device cgroup rules)
// without a valid allocation, or an allocation whose LPUs it does not
// hold. The validator and the audit open a container's allocation once
// (openGrant) and judge every check on that.
//
// Apart from the optional cross-check and reading lpu-dra's checkpoint for
// claim containers no rule does I/O: the inventory is an atomic snapshot
// refreshed in the background.
//
//	v, _ := verify.New(verify.Config{Key: key, Store: store, Ledger: led})
//	adj, alloc, err := v.Decide(ctx, pod, ctr) // err is a *Refusal
//	if errors.Is(err, verify.ErrSealedAllocation) { ... }
package verify

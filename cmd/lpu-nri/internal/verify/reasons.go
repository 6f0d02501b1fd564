package verify

// Refusal reasons: a Refusal's Reason, and the values of the reason label
// of lpu_nri_refusals_total.
const (
	ReasonPodAnnotation    = "pod-annotation"    // a reserved key in the pod annotations
	ReasonBadSeal          = "bad-seal"          // seal missing, malformed or from another key
	ReasonBadValue         = "bad-value"         // sealed value malformed (parse, size, duplicates), or LPU_VISIBLE_DEVICES set twice in the env
	ReasonUnknownDevice    = "unknown-device"    // ID not in the current inventory
	ReasonUnhealthyDevice  = "unhealthy-device"  // ID known but unhealthy
	ReasonPodResources     = "podresources"      // kubelet PodResources disagrees or cannot answer
	ReasonNoInventory      = "no-inventory"      // discovery has not succeeded yet
	ReasonReplayed         = "replayed"          // allocation ID first used by another pod, or not recordable
	ReasonMismatch         = "device-mismatch"   // validator: final LPU nodes differ from the allocation
	ReasonUnallocatedNodes = "unallocated-nodes" // privileged container carrying LPU nodes it was not allocated
	ReasonDeviceCgroup     = "device-cgroup"     // device cgroup rules admit LPUs the container was not allocated
)

// Reasons lists every refusal reason, so each series exists from the start.
var Reasons = []string{
	ReasonPodAnnotation, ReasonBadSeal, ReasonBadValue, ReasonUnknownDevice,
	ReasonUnhealthyDevice, ReasonPodResources, ReasonNoInventory,
	ReasonReplayed, ReasonMismatch, ReasonUnallocatedNodes, ReasonDeviceCgroup,
}

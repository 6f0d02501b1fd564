package driver

import (
	"fmt"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/hyperaccel/lpu-node/cmd/lpu-dra/internal/state"
)

// ReasonForeignPod is the refusal reason of a claim generated for one pod
// (from a ResourceClaimTemplate) that is reserved for another pod too.
const ReasonForeignPod = "foreign_pod"

// podClaimAnnotation marks a claim the resourceclaim controller generated
// for one pod from a template; the claim's controller ownerReference
// names that pod.
const podClaimAnnotation = "resource.kubernetes.io/pod-claim-name"

// ownerPod is the UID of the pod claim was generated for (its controller
// ownerReference of kind Pod); generated says the claim is one (that
// reference or the controller's annotation): a generated claim without an
// owner pod has an empty UID and admits no pod.
func ownerPod(claim *resourceapi.ResourceClaim) (uid string, generated bool) {
	_, generated = claim.Annotations[podClaimAnnotation]
	for _, o := range claim.OwnerReferences {
		if o.APIVersion == "v1" && o.Kind == "Pod" && o.Controller != nil && *o.Controller {
			return string(o.UID), true
		}
	}
	return "", generated
}

// foreignPods are the pods of claim's reservedFor other than the pod the
// claim was generated for; none for a claim not generated for a pod. A
// pod that names another pod's generated claim by resourceClaimName would
// otherwise share its LPUs past the admission policies, which gate claims
// by their template's name only in the namespaces that opt in.
func foreignPods(claim *resourceapi.ResourceClaim) []string {
	owner, generated := ownerPod(claim)
	if !generated {
		return nil
	}
	var out []string
	for _, r := range claim.Status.ReservedFor {
		if r.Resource == "pods" && string(r.UID) != owner {
			out = append(out, r.Name+" ("+string(r.UID)+")")
		}
	}
	slices.Sort(out)
	return out
}

// refuseForeignPods refuses a claim generated for one pod that is
// reserved for another.
func refuseForeignPods(claim *resourceapi.ResourceClaim) error {
	foreign := foreignPods(claim)
	if len(foreign) == 0 {
		return nil
	}
	return state.Refuse(ReasonForeignPod, "claim was generated for %s but is also reserved for %s: a pod may not use another pod's generated claim (by resourceClaimName); give it a claim of its own",
		ownerName(claim), strings.Join(foreign, ", "))
}

// ownerName is how a refusal names the pod a claim was generated for.
func ownerName(claim *resourceapi.ResourceClaim) string {
	owner, _ := ownerPod(claim)
	for _, o := range claim.OwnerReferences {
		if owner != "" && string(o.UID) == owner {
			return fmt.Sprintf("pod %s (%s)", o.Name, o.UID)
		}
	}
	return "a pod it names no owner reference to"
}

// ownPods are the pods of claim's reservedFor lpu-nri may admit: all of
// them, but of a claim generated for a pod only that pod.
func ownPods(claim *resourceapi.ResourceClaim) []string {
	pods := podUIDs(claim)
	owner, generated := ownerPod(claim)
	if !generated {
		return pods
	}
	return slices.DeleteFunc(pods, func(p string) bool { return p != owner })
}

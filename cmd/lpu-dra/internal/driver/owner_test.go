package driver

import (
	"context"
	"slices"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	checkpoint "github.com/hyperaccel/lpu-node/internal/dracheckpoint"
	"github.com/hyperaccel/lpu-node/internal/health/healthtest"
)

// generated makes c a claim the resourceclaim controller generated for
// pod owner (as it does from a pod's resourceClaimTemplateName).
func generated(c *resourceapi.ResourceClaim, owner string) *resourceapi.ResourceClaim {
	c = c.DeepCopy()
	c.Annotations = map[string]string{podClaimAnnotation: "lpus"}
	c.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "p-" + owner, UID: types.UID(owner),
		Controller: new(true), BlockOwnerDeletion: new(true)}}
	return c
}

// TestGeneratedClaimAdmitsOnlyItsPod: a claim generated for one pod (the
// controller's annotation and ownerReference) is prepared and admitted for
// that pod only. Another pod that names it by resourceClaimName, and so is
// in its reservedFor, makes Prepare refuse the claim (foreign_pod) naming
// both pods; one that joins reservedFor after Prepare is never admitted.
// A shared claim made by a user still admits every pod it is reserved for.
func TestGeneratedClaimAdmitsOnlyItsPod(t *testing.T) {
	e := newEnv(t, healthtest.New(t, healthtest.Ring(8)))
	admitted := func(pod, uid string) bool {
		_, err := checkpoint.PodLPUs(e.stateDir, pod, []string{uid})
		return err == nil
	}
	c := generated(claim("u1", arc(0, 2)), "owner")

	r := e.prepare(reservedFor(c, "owner", "intruder"))
	if r.Err == nil || !strings.Contains(r.Err.Error(), "generated for pod p-owner (owner) but is also reserved for p-intruder (intruder)") {
		t.Fatalf("Prepare of a generated claim reserved for another pod = %v, want refused naming both", r.Err)
	}
	if got := counter(t, e.metrics, MetricRefusals, ReasonForeignPod); got != 1 {
		t.Fatalf("refusals{reason=%s} = %v, want 1", ReasonForeignPod, got)
	}
	if len(e.d.Prepared()) != 0 {
		t.Fatalf("refused claim prepared: %v", e.d.Prepared())
	}

	if r := e.prepare(reservedFor(c, "owner")); r.Err != nil {
		t.Fatalf("Prepare for its own pod: %v", r.Err)
	}
	changed, err := e.d.SyncReservedFor(context.Background(), "u1", reservedFor(c, "owner", "intruder"))
	if err != nil || changed {
		t.Fatalf("SyncReservedFor with another pod joined = %v, %v; want unchanged", changed, err)
	}
	if got := e.d.Prepared()["u1"].Pods; !slices.Equal(got, []string{"owner"}) || !admitted("owner", "u1") || admitted("intruder", "u1") {
		t.Fatalf("pods %v (owner admitted %v, intruder admitted %v), want the owner only", got, admitted("owner", "u1"), admitted("intruder", "u1"))
	}

	orphan := claim("u2", arc(4, 2)) // the annotation without an owner pod
	orphan.Annotations = map[string]string{podClaimAnnotation: "lpus"}
	if r := e.prepare(orphan); r.Err == nil || !strings.Contains(r.Err.Error(), "no owner reference") {
		t.Fatalf("Prepare of a generated claim with no owner pod = %v, want refused", r.Err)
	}

	shared := reservedFor(claim("u3", arc(4, 2)), "a", "b")
	if r := e.prepare(shared); r.Err != nil {
		t.Fatalf("Prepare of a user's shared claim: %v", r.Err)
	}
	if !admitted("a", "u3") || !admitted("b", "u3") {
		t.Fatal("a user's shared claim does not admit both its pods")
	}
}

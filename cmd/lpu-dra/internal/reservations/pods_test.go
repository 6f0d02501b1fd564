package reservations

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func claimPod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "p", UID: "u1", Labels: map[string]string{"big": "label"}},
		Spec: corev1.PodSpec{NodeName: "n", Containers: []corev1.Container{{Name: "c", Image: "i"}},
			ResourceClaims: []corev1.PodResourceClaim{
				{Name: "a", ResourceClaimName: new("named")},
				{Name: "b", ResourceClaimTemplateName: new("tpl")},
				{Name: "c", ResourceClaimName: new("named")},
			}},
		Status: corev1.PodStatus{Phase: corev1.PodPending, ResourceClaimStatuses: []corev1.PodResourceClaimStatus{
			{Name: "b", ResourceClaimName: new("p-b-x1")}, {Name: "d"}}},
	}
}

// The claims of a pod: named ones once, generated ones from the status,
// in the pod's namespace; a template claim not generated yet is none.
func TestClaimNames(t *testing.T) {
	got := claimNames(claimPod())
	want := []types.NamespacedName{{Namespace: "team", Name: "named"}, {Namespace: "team", Name: "p-b-x1"}}
	if !slices.Equal(got, want) {
		t.Fatalf("claimNames = %v, want %v", got, want)
	}
	if got := claimNames(&corev1.Pod{}); got != nil {
		t.Fatalf("claimNames(no claims) = %v", got)
	}
}

// Only changes that can move reservations cost a GET.
func TestClaimsMoved(t *testing.T) {
	base := claimPod()
	tests := map[string]struct {
		change func(*corev1.Pod)
		moved  bool
	}{
		"status only":    {func(p *corev1.Pod) { p.Status.Message = "x"; p.ResourceVersion = "9" }, false},
		"phase":          {func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }, true},
		"terminating":    {func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{} }, true},
		"claim resolved": {func(p *corev1.Pod) { p.Status.ResourceClaimStatuses[1].ResourceClaimName = new("p-d-x2") }, true},
		"new uid":        {func(p *corev1.Pod) { p.UID = "u2" }, true},
	}
	for name, tc := range tests {
		p := base.DeepCopy()
		tc.change(p)
		if got := claimsMoved(base, p); got != tc.moved {
			t.Errorf("%s: claimsMoved = %v, want %v", name, got, tc.moved)
		}
	}
}

// The cached pod keeps what the watcher reads and nothing else.
func TestTrimPod(t *testing.T) {
	obj, err := trimPod(claimPod())
	if err != nil {
		t.Fatal(err)
	}
	p := obj.(*corev1.Pod)
	if p.Labels != nil || p.Spec.Containers != nil {
		t.Fatalf("trimmed pod keeps %v %v", p.Labels, p.Spec.Containers)
	}
	if !slices.Equal(claimNames(p), claimNames(claimPod())) || p.UID != "u1" || p.Spec.NodeName != "n" || p.Status.Phase != corev1.PodPending {
		t.Fatalf("trimmed pod lost what the watcher reads: %+v", p)
	}
	if other, _ := trimPod("not a pod"); other != "not a pod" {
		t.Fatal("trimPod changed a non-pod")
	}
}

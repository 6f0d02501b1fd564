package reservations

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// claimNames are the claims pod uses: named ones from its spec, generated
// ones from its status (the resourceclaim controller fills them in before
// the pod can be scheduled).
func claimNames(pod *corev1.Pod) []types.NamespacedName {
	var out []types.NamespacedName
	add := func(name *string) {
		if name != nil && *name != "" {
			nn := types.NamespacedName{Namespace: pod.Namespace, Name: *name}
			if !slices.Contains(out, nn) {
				out = append(out, nn)
			}
		}
	}
	for i := range pod.Spec.ResourceClaims {
		add(pod.Spec.ResourceClaims[i].ResourceClaimName)
	}
	for i := range pod.Status.ResourceClaimStatuses {
		add(pod.Status.ResourceClaimStatuses[i].ResourceClaimName)
	}
	return out
}

// podChanged queues the prepared claims of a pod that is new, changed its
// claims, or started terminating; other status updates do not cost a GET.
func (w *watcher) podChanged(oldObj, newObj any) {
	pod, ok := newObj.(*corev1.Pod)
	if !ok {
		return
	}
	if old, ok := oldObj.(*corev1.Pod); ok && !claimsMoved(old, pod) {
		return
	}
	w.enqueue(pod, false)
}

// claimsMoved says whether an update can have changed the pod's claims'
// reservations.
func claimsMoved(old, pod *corev1.Pod) bool {
	return old.UID != pod.UID || old.Status.Phase != pod.Status.Phase ||
		(old.DeletionTimestamp == nil) != (pod.DeletionTimestamp == nil) ||
		!slices.Equal(claimNames(old), claimNames(pod))
}

// podDeleted queues the pod's prepared claims now and once more after
// GoneRetry, by when the resourceclaim controller has normally dropped the
// pod from their reservedFor.
func (w *watcher) podDeleted(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if pod, ok := obj.(*corev1.Pod); ok {
		w.enqueue(pod, true)
	}
}

func (w *watcher) enqueue(pod *corev1.Pod, gone bool) {
	names := claimNames(pod)
	if len(names) == 0 {
		return
	}
	for _, p := range w.claims.PreparedClaims() {
		if !slices.Contains(names, p.NamespacedName) {
			continue
		}
		w.queue.Add(p.NamespacedName)
		if gone {
			w.queue.AddAfter(p.NamespacedName, w.opts.GoneRetry)
		}
	}
}

// trimPod keeps what the watcher reads of a pod, so a node's pod cache
// stays small.
func trimPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID,
			ResourceVersion: pod.ResourceVersion, DeletionTimestamp: pod.DeletionTimestamp},
		Spec:   corev1.PodSpec{NodeName: pod.Spec.NodeName, ResourceClaims: pod.Spec.ResourceClaims},
		Status: corev1.PodStatus{Phase: pod.Status.Phase, ResourceClaimStatuses: pod.Status.ResourceClaimStatuses},
	}, nil
}

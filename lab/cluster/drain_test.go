package main

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// A delete that timed out (an overloaded apiserver) leaves the pod; drain
// deletes it again instead of waiting out its deadline and losing the run.
func TestDrainRetriesTimedOutDelete(t *testing.T) {
	old := resweep
	resweep = 100 * time.Millisecond
	t.Cleanup(func() { resweep = old })
	cs := fake.NewClientset(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a-j1", Namespace: namespace, Labels: map[string]string{"arm": "a"}}})
	var deletes atomic.Int32
	cs.PrependReactor("delete", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		if deletes.Add(1) == 1 {
			return true, nil, apierrors.NewTimeoutError("request did not complete within requested timeout", 0)
		}
		return false, nil, nil
	})
	var logged []string
	r := newRunner(cs, armSpec{name: "a"}, nil, time.Second, 1, func(f string, a ...any) { logged = append(logged, f) })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r.deletePod(ctx, "a-j1")
	if len(logged) != 1 {
		t.Fatalf("the timed-out delete was not logged: %v", logged)
	}
	if err := r.drain(ctx); err != nil {
		t.Fatal(err)
	}
	if n := deletes.Load(); n != 2 {
		t.Errorf("%d deletes, want the failed one and one retry", n)
	}
}

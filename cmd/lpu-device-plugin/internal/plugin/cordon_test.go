package plugin

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/hyperaccel/lpu-node/internal/clustertest"
	"github.com/hyperaccel/lpu-node/internal/kubelettest"
	"github.com/hyperaccel/lpu-node/pkg/cordon"
	"github.com/hyperaccel/lpu-node/pkg/device/devicetest"
)

// TestCordonedLPUUnhealthy: with the real pkg/cordon Watcher of a Node on
// a real kube-apiserver v1.37.2, the kubelet (its device plugin gRPC API)
// sees every LPU Unhealthy until the Node was read (fail closed), then
// all Healthy; a cordoned LPU Unhealthy and refused by Allocate with the
// reason "cordoned"; Healthy again after uncordon. An LPU unhealthy of
// its own keeps its reason when cordoned.
func TestCordonedLPUUnhealthy(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{})
	cs := kubernetes.NewForConfigOrDie(c.Config)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w := cordon.NewWatcher(cordon.Options{Client: cs, Node: testNode, Retry: 50 * time.Millisecond})
	n := start(t, setup{rows: eight(), cordon: w})
	s := n.client.Watch(t)
	unhealthy := func(want ...string) func([]*pluginapi.Device) bool {
		return func(d []*pluginapi.Device) bool {
			h := kubelettest.Health(d)
			if len(d) != 8 {
				return false
			}
			for id, v := range h {
				bad := false
				for _, w := range want {
					bad = bad || w == id || w == "*"
				}
				if (v == pluginapi.Unhealthy) != bad {
					return false
				}
			}
			return true
		}
	}
	s.WaitFor(t, 2*time.Second, "every LPU Unhealthy before the Node is read", unhealthy("*"))
	if _, err := allocate(n, []string{"lpu0"}); err == nil || !strings.Contains(err.Error(), "lpu0 ("+ReasonCordonUnknown+")") {
		t.Errorf("Allocate lpu0 before the Node is read: %v", err)
	}

	go func() { _ = w.Run(ctx) }()
	s.WaitFor(t, 5*time.Second, "every LPU Healthy once the Node is read", unhealthy())

	patch := func(value any) time.Time {
		t.Helper()
		b, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{cordon.Annotation: value}}})
		if err != nil {
			t.Fatal(err)
		}
		at := time.Now()
		if _, err := cs.CoreV1().Nodes().Patch(ctx, testNode, types.MergePatchType, b, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		return at
	}
	at := patch("lpu3,lpu5")
	s.WaitFor(t, 5*time.Second, "lpu3 and lpu5 Unhealthy", unhealthy("lpu3", "lpu5"))
	t.Logf("cordon: annotation patched → kubelet's ListAndWatch shows lpu3, lpu5 Unhealthy in %v", time.Since(at))
	if _, err := allocate(n, []string{"lpu2", "lpu3"}); err == nil || !strings.Contains(err.Error(), "lpu3 ("+ReasonCordoned+")") {
		t.Errorf("Allocate lpu2,lpu3 while lpu3 is cordoned: %v", err)
	}
	if _, err := allocate(n, []string{"lpu1", "lpu2"}); err != nil {
		t.Errorf("Allocate lpu1,lpu2 beside the cordoned LPUs: %v", err)
	}

	// An LPU failing of its own, cordoned too: its own reason stays.
	devicetest.SetStatus(t, n.root, "lpu5", "ECC_ERROR")
	var err error
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if _, err = allocate(n, []string{"lpu5"}); err != nil && strings.Contains(err.Error(), "ECC_ERROR") {
			break
		}
	}
	if err == nil || !strings.Contains(err.Error(), "ECC_ERROR") {
		t.Errorf("Allocate lpu5, failing and cordoned: %v, want its own reason", err)
	}

	at = patch(nil)
	s.WaitFor(t, 5*time.Second, "lpu3 Healthy after uncordon, lpu5 still failing", unhealthy("lpu5"))
	t.Logf("uncordon: annotation removed → kubelet's ListAndWatch shows lpu3 Healthy in %v", time.Since(at))
	if _, err := allocate(n, []string{"lpu3"}); err != nil {
		t.Errorf("Allocate lpu3 after uncordon: %v", err)
	}
}

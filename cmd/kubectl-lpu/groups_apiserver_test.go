package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedapi "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/hyperaccel/lpu-node/internal/clustertest"
)

// TestPodsShowGroupsFromAPIServer runs `kubectl lpu pods -o json` against
// a real kube-apiserver v1.37.2 serving the Workload API (GenericWorkload
// on, scheduling.k8s.io/v1beta1): a gang of 2 with one pod bound and
// Running, one Pending, is listed with both pods and is not whole; once
// the second runs it is.
func TestPodsShowGroupsFromAPIServer(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{APIServerFlags: []string{
		"--feature-gates=GenericWorkload=true", "--runtime-config=scheduling.k8s.io/v1beta1=true"}})
	cs := kubernetes.NewForConfigOrDie(c.Config)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := cs.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pg := &schedapi.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: "job"},
		Spec: schedapi.PodGroupSpec{SchedulingPolicy: schedapi.PodGroupSchedulingPolicy{Gang: &schedapi.GangSchedulingPolicy{MinCount: 2}}}}
	if _, err := cs.SchedulingV1beta1().PodGroups("default").Create(ctx, pg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"job-0", "job-1"} {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{
			SchedulingGroup: &corev1.PodSchedulingGroup{PodGroupName: &pg.Name},
			Containers:      []corev1.Container{{Name: "main", Image: "example/lpu-worker"}}}}
		if _, err := cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	runPod(ctx, t, cs, "job-0")
	if got := groupsSeen(t, c.Kubeconfig); got["job-0"] != "running 1/2 whole=false" || got["job-1"] != "running 1/2 whole=false" {
		t.Fatalf("one of two running: %v", got)
	}
	runPod(ctx, t, cs, "job-1")
	if got := groupsSeen(t, c.Kubeconfig); got["job-1"] != "running 2/2 whole=true" {
		t.Fatalf("both running: %v", got)
	}
}

// runPod binds a pod to a node name and marks it Running, as the
// scheduler and a kubelet would.
func runPod(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string) {
	t.Helper()
	b := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: name}, Target: corev1.ObjectReference{Kind: "Node", Name: "node-0"}}
	if err := cs.CoreV1().Pods("default").Bind(ctx, b, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p, err := cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status.Phase = corev1.PodRunning
	if _, err := cs.CoreV1().Pods("default").UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// groupsSeen runs `kubectl lpu pods -o json` and returns per pod its
// group's running/minCount and whether it is whole.
func groupsSeen(t *testing.T, kubeconfig string) map[string]string {
	t.Helper()
	var out bytes.Buffer
	if err := run([]string{"pods", "-o", "json", "--kubeconfig", kubeconfig}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	var pods []struct {
		Name  string `json:"name"`
		Group *struct {
			MinCount int  `json:"minCount"`
			Running  int  `json:"running"`
			Whole    bool `json:"whole"`
		} `json:"podGroup"`
	}
	if err := json.Unmarshal(out.Bytes(), &pods); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	seen := map[string]string{}
	for _, p := range pods {
		if p.Group != nil {
			seen[p.Name] = fmt.Sprintf("running %d/%d whole=%t", p.Group.Running, p.Group.MinCount, p.Group.Whole)
		}
	}
	return seen
}

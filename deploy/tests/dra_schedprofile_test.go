package tests_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/hyperaccel/lpu-node/internal/clustertest"
)

// schedulerProfile is the shipped example of docs/dra.md, "Scale".
const schedulerProfile = "scheduler/kube-scheduler-lpu-profile.yaml"

// The shipped scheduler configuration as a real v1.37.2 kube-scheduler
// loads it (strictly: an unknown or misspelt field stops the scheduler):
// a pod naming the lpu-dra profile is scheduled by it, the default
// profile still schedules every other pod, and a pod naming a profile
// that does not exist is not scheduled, so the lpu-dra profile is what
// placed the first one.
func TestSchedulerProfile(t *testing.T) {
	raw, err := os.ReadFile(schedulerProfile)
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		ClientConnection struct{ Kubeconfig string }
		Profiles         []struct {
			SchedulerName            string
			PercentageOfNodesToScore *int
		}
	}
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		t.Fatalf("%s: %v", schedulerProfile, err)
	}
	if len(cfg.Profiles) != 2 || cfg.Profiles[0].SchedulerName != "default-scheduler" || cfg.Profiles[0].PercentageOfNodesToScore != nil ||
		cfg.Profiles[1].SchedulerName != "lpu-dra" || cfg.Profiles[1].PercentageOfNodesToScore == nil || *cfg.Profiles[1].PercentageOfNodesToScore != 5 {
		t.Fatalf("%s: profiles %+v, want default-scheduler unchanged and lpu-dra at 5 %%", schedulerProfile, cfg.Profiles)
	}
	// clustertest writes the scheduler's kubeconfig into Dir before it
	// starts the scheduler; with --config the scheduler reads only the file.
	dir := t.TempDir()
	path := filepath.Join(dir, "scheduler.yaml")
	own := strings.Replace(string(raw), cfg.ClientConnection.Kubeconfig, filepath.Join(dir, "kube-scheduler.kubeconfig"), 1)
	if err := os.WriteFile(path, []byte(own), 0o600); err != nil {
		t.Fatal(err)
	}
	// Nodes have no kubelet (no not-ready taint) and no controller makes
	// the default ServiceAccount.
	c := clustertest.Start(t, clustertest.Options{Dir: dir, Scheduler: true, SchedulerFlags: []string{"--config", path},
		APIServerFlags: []string{"--disable-admission-plugins=TaintNodesByCondition,ServiceAccount"}})
	cs := kubernetes.NewForConfigOrDie(c.Config)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	node := readyNode(ctx, t, cs, "lpu-node-1", nil)
	for name, scheduler := range map[string]string{"lpu": "lpu-dra", "other": "", "nobody": "no-such-profile"} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: corev1.PodSpec{
			SchedulerName: scheduler, Containers: []corev1.Container{{Name: "c", Image: "pause"}}}}
		if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"lpu", "other"} {
		poll(ctx, t, "pod "+name+" bound", func() error {
			p, err := cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
			if err == nil && p.Spec.NodeName != node.Name {
				err = fmt.Errorf("on %q", p.Spec.NodeName)
			}
			return err
		})
	}
	p, err := cs.CoreV1().Pods("default").Get(ctx, "nobody", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Spec.NodeName != "" {
		t.Errorf("a pod naming no configured profile was bound to %s: the test cannot tell profiles apart", p.Spec.NodeName)
	}
}

package clustertest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
)

// TestCluster runs the whole control plane once and checks each part does
// its real job: the apiserver validates and stores DRA objects and enforces
// RBAC, the controller-manager creates ServiceAccounts, the scheduler binds.
func TestCluster(t *testing.T) {
	c := Start(t, Options{Scheduler: true, ControllerManager: true})
	cs := kubernetes.NewForConfigOrDie(c.Config)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	t.Run("kubeconfig", func(t *testing.T) {
		cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
		if err != nil {
			t.Fatalf("load %s: %v", c.Kubeconfig, err)
		}
		v, err := kubernetes.NewForConfigOrDie(cfg).Discovery().ServerVersion()
		if err != nil {
			t.Fatalf("server version through the kubeconfig: %v", err)
		}
		if v.GitVersion != KubernetesVersion {
			t.Errorf("server version %s, want %s", v.GitVersion, KubernetesVersion)
		}
	})

	t.Run("device class and slice", func(t *testing.T) {
		dc := &resourceapi.DeviceClass{
			ObjectMeta: metav1.ObjectMeta{Name: "lpu.hyperaccel.ai"},
			Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{
				CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "lpu.hyperaccel.ai"`},
			}}},
		}
		if _, err := cs.ResourceV1().DeviceClasses().Create(ctx, dc, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create DeviceClass: %v", err)
		}
		gotDC, err := cs.ResourceV1().DeviceClasses().Get(ctx, dc.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get DeviceClass: %v", err)
		}
		if got := gotDC.Spec.Selectors[0].CEL.Expression; got != dc.Spec.Selectors[0].CEL.Expression {
			t.Errorf("DeviceClass selector read back %q", got)
		}

		slice := &resourceapi.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{Name: "node-a-lpu"},
			Spec: resourceapi.ResourceSliceSpec{
				Driver:   "lpu.hyperaccel.ai",
				NodeName: ptr.To("node-a"),
				Pool:     resourceapi.ResourcePool{Name: "node-a", Generation: 1, ResourceSliceCount: 1},
				Devices: []resourceapi.Device{{
					Name: "arc-0-4",
					Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
						"lpu.hyperaccel.ai/size": {IntValue: ptr.To[int64](4)},
						"lpu.hyperaccel.ai/lpus": {StringValue: ptr.To("lpu0,lpu1,lpu2,lpu3")},
					},
					Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
						"memory": {Value: resource.MustParse("64Gi")},
					},
				}},
			},
		}
		if _, err := cs.ResourceV1().ResourceSlices().Create(ctx, slice, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create ResourceSlice: %v", err)
		}
		got, err := cs.ResourceV1().ResourceSlices().Get(ctx, slice.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get ResourceSlice: %v", err)
		}
		if n := len(got.Spec.Devices); n != 1 {
			t.Fatalf("slice read back with %d devices, want 1", n)
		}
		d := got.Spec.Devices[0]
		if v := d.Attributes["lpu.hyperaccel.ai/lpus"].StringValue; v == nil || *v != "lpu0,lpu1,lpu2,lpu3" {
			t.Errorf("lpus attribute read back %v", v)
		}
		if q := d.Capacity["memory"].Value; q.Cmp(resource.MustParse("64Gi")) != 0 {
			t.Errorf("memory capacity read back %s", q.String())
		}

		// the real validation runs: a device name must be a DNS label
		bad := slice.DeepCopy()
		bad.Name = "node-a-bad"
		bad.Spec.Pool.Name = "node-a-bad"
		bad.Spec.Devices[0].Name = "Arc_0"
		_, err = cs.ResourceV1().ResourceSlices().Create(ctx, bad, metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "Arc_0") {
			t.Errorf("slice with device name Arc_0: got %v, want Invalid naming it", err)
		}
	})

	t.Run("rbac", func(t *testing.T) {
		cfg, err := c.UserConfig("tenant", "tenants")
		if err != nil {
			t.Fatal(err)
		}
		_, err = kubernetes.NewForConfigOrDie(cfg).ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if !apierrors.IsForbidden(err) {
			t.Errorf("tenant lists ResourceSlices: got %v, want Forbidden", err)
		}
		if _, err := c.UserConfig(""); err == nil {
			t.Error("UserConfig with an empty user: no error")
		}
	})

	t.Run("controller-manager and scheduler", func(t *testing.T) {
		if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			_, err := cs.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
			return err == nil, nil
		}); err != nil {
			t.Fatalf("no default ServiceAccount from the controller-manager: %v", err)
		}
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}
		node, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create node: %v", err)
		}
		node.Status = corev1.NodeStatus{
			Capacity:    corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("32Gi"), corev1.ResourcePods: resource.MustParse("110")},
			Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("32Gi"), corev1.ResourcePods: resource.MustParse("110")},
			Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "Test", LastHeartbeatTime: metav1.Now()}},
		}
		if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("node status: %v", err)
		}
		schedule(ctx, t, cs, "p")
	})

	t.Run("scheduler restart", func(t *testing.T) {
		before := c.PIDs()["kube-scheduler"]
		bad := filepath.Join(t.TempDir(), "kube-scheduler")
		if err := c.RestartScheduler(ctx, bad); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("restart with a missing binary: %v, want an error naming it", err)
		}
		if got := c.PIDs()["kube-scheduler"]; got != before {
			t.Fatalf("a refused restart replaced the scheduler (pid %d → %d)", before, got)
		}
		if err := c.RestartScheduler(ctx, ""); err != nil {
			t.Fatal(err)
		}
		after := c.PIDs()["kube-scheduler"]
		if err := syscall.Kill(before, 0); after == before || !errors.Is(err, syscall.ESRCH) {
			t.Errorf("scheduler pid %d → %d, the old one: %v", before, after, err)
		}
		if _, err := os.Stat(filepath.Join(c.Dir, "logs", "kube-scheduler.1.log")); err != nil {
			t.Errorf("the first scheduler's log: %v", err)
		}
		schedule(ctx, t, cs, "p2")
	})

	pids := c.PIDs()
	if len(pids) != 4 {
		t.Errorf("PIDs: %v, want 4 components", pids)
	}
	if err := c.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	for name, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("%s (pid %d) still there after Stop: %v", name, pid, err)
		}
	}
	if _, err := os.Stat(c.Dir); !os.IsNotExist(err) {
		t.Errorf("cluster dir %s after Stop: %v", c.Dir, err)
	}
}

// schedule creates pod name and waits until the scheduler binds it to
// node-a.
func schedule(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{
			Containers:  []corev1.Container{{Name: "c", Image: "localhost/busybox:e2e"}},
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
		},
	}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod %s: %v", name, err)
	}
	var bound string
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		bound = p.Spec.NodeName
		return bound != "", nil
	}); err != nil {
		t.Fatalf("pod %s not bound by the scheduler: %v", name, err)
	}
	if bound != "node-a" {
		t.Errorf("pod %s bound to %q, want node-a", name, bound)
	}
}

func TestFindBinariesMissing(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("LPU_E2E_CACHE", dir)
	_, err := FindBinaries()
	if err == nil || !strings.Contains(err.Error(), dir+"/etcd-"+EtcdVersion+"/etcd") {
		t.Errorf("FindBinaries in an empty cache: %v, want an error naming the etcd path", err)
	}
}

// TestVersionsMatchTools keeps the versions here and the ones tools.sh
// builds from drifting apart.
func TestVersionsMatchTools(t *testing.T) {
	b, err := os.ReadFile("../../test/e2e/tools.sh")
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"K8S_VERSION": KubernetesVersion, "ETCD_VERSION": EtcdVersion} {
		m := regexp.MustCompile(name + `=\$\{` + name + `:-([^}]+)\}`).FindSubmatch(b)
		if m == nil {
			t.Errorf("tools.sh sets no default %s", name)
			continue
		}
		if string(m[1]) != want {
			t.Errorf("tools.sh %s=%s, clustertest says %s", name, m[1], want)
		}
	}
}

// TestStartFailure: a component that cannot start makes New fail with its
// log, and nothing New started keeps running.
func TestStartFailure(t *testing.T) {
	bins, err := FindBinaries()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	dir := t.TempDir()
	_, err = New(context.Background(), Options{Binaries: bins, Dir: dir, APIServerFlags: []string{"--no-such-flag"}})
	if err == nil || !strings.Contains(err.Error(), "kube-apiserver exited") || !strings.Contains(err.Error(), "no-such-flag") {
		t.Fatalf("New with a bad apiserver flag: %v, want kube-apiserver exited naming the flag", err)
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range procs {
		b, _ := os.ReadFile(f)
		if strings.Contains(string(b), dir) {
			t.Errorf("%s still runs with our dir: %q", filepath.Dir(f), strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "logs", "etcd.log")); err != nil {
		t.Errorf("etcd log in the given dir: %v", err)
	}
}

func TestNewBadBinaries(t *testing.T) {
	dir := t.TempDir()
	notExec := filepath.Join(dir, "etcd")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := New(context.Background(), Options{Binaries: Binaries{Etcd: notExec, KubeAPIServer: notExec, KubeScheduler: notExec, KubeControllerManager: notExec}})
	if err == nil || !strings.Contains(err.Error(), notExec) {
		t.Errorf("New with a non-executable etcd: %v, want an error naming it", err)
	}
}

// onFreshPort picks another port when a component lost its port to
// another process, and gives up at once on any other failure.
func TestOnFreshPort(t *testing.T) {
	var tried []int
	port, err := onFreshPort(func(p int) error {
		tried = append(tried, p)
		if len(tried) == 1 {
			return errors.New("kube-controller-manager exited: listen tcp 127.0.0.1:1: bind: address already in use")
		}
		return nil
	})
	if err != nil || len(tried) != 2 || port != tried[1] || tried[0] == 0 {
		t.Fatalf("port %d, err %v, tried %v: want the second port after a taken one", port, err, tried)
	}
	tried = nil
	boom := errors.New("bad flag")
	if _, err := onFreshPort(func(p int) error { tried = append(tried, p); return boom }); !errors.Is(err, boom) || len(tried) != 1 {
		t.Fatalf("err %v after %d tries, want bad flag after 1", err, len(tried))
	}
	tried = nil
	if _, err := onFreshPort(func(p int) error {
		tried = append(tried, p)
		return errors.New("address already in use")
	}); err == nil || len(tried) != 3 {
		t.Fatalf("err %v after %d tries, want an error after 3", err, len(tried))
	}
}

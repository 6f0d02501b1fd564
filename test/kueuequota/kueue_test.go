package kueuequota

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/hyperaccel/lpu-node/internal/clustertest"
	"github.com/hyperaccel/lpu-node/internal/daemontest"
)

// kueueVersion is the Kueue that tools.sh builds into the cache.
const kueueVersion = "v0.17.0"

// Budgets of the waits, on a busy 2-core machine.
const (
	kueueStart = 2 * time.Minute  // manager ready, CRDs established
	admitWait  = 60 * time.Second // Kueue admits (or refuses) a workload
	drainWait  = 60 * time.Second // a deleted job's quota is released
)

const (
	ns        = "default"
	queueName = "lpu" // the LocalQueue of deploy/kueue/queues.yaml
	repoRoot  = "../.."
)

var (
	workloadGVR     = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "workloads"}
	clusterQueueGVR = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "clusterqueues"}
	crdGVR          = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
)

// env is one control plane with Kueue running on it.
type env struct {
	cs    kubernetes.Interface
	dyn   dynamic.Interface
	kueue *daemontest.Proc
}

// kueueDir is the tools.sh cache folder of Kueue: the manager and crds/.
// The test skips without it, or fails under CI=true, as clustertest does.
func kueueDir(t *testing.T) string {
	t.Helper()
	cache := os.Getenv("LPU_E2E_CACHE")
	if cache == "" {
		cache = clustertest.DefaultCacheDir
	}
	dir := filepath.Join(cache, "kueue-"+kueueVersion)
	err := clustertest.CheckExecutable(filepath.Join(dir, "kueue"))
	if err == nil {
		_, err = os.Stat(filepath.Join(dir, "crds", "kueue.x-k8s.io_workloads.yaml"))
	}
	if err != nil {
		msg := fmt.Sprintf("kueue: %v (build it with: bash test/e2e/tools.sh kueue)", err)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return dir
}

// TestLPUQuota: a ClusterQueue of 8 LPUs (deploy/kueue/queues.yaml, with
// deploy/kueue/config.yaml in Kueue's Configuration) admits two Jobs of 4
// LPUs and holds the third, although the nodes have room for it, until one
// of the first ends (its pod Succeeded); then it admits it. Each mode asks
// 4 LPUs its own way.
func TestLPUQuota(t *testing.T) {
	dir := kueueDir(t)
	e := start(t, dir)
	for node := range 2 { // 16 LPUs: the third job is held by quota, not by room
		e.createNode(t, fmt.Sprintf("lpu-node-%d", node), 8)
	}

	cases := []struct {
		name string
		spec func() corev1.PodSpec
		// usage is what Kueue must count for one job, and absent what it
		// must not count.
		usage  map[string]int64
		absent []string
	}{
		{"device-plugin", limitsPod("hyperaccel.ai/lpu", 4, false), map[string]int64{"hyperaccel.ai/lpu": 4}, nil},
		// The transformation of config.yaml: one 4-arc is 4 LPUs, the arc
		// itself is not counted (strategy Replace).
		{"dra-extended-resource", limitsPod("hyperaccel.ai/lpu-arc-4", 1, false), map[string]int64{"hyperaccel.ai/lpu": 4}, []string{"hyperaccel.ai/lpu-arc-4"}},
		// With requests written out, Kueue's DRAExtendedResources gate (off
		// in config.yaml) would count the arc a second time, as one device
		// of its mapped class.
		{"dra-extended-resource-requests", limitsPod("hyperaccel.ai/lpu-arc-4", 1, true), map[string]int64{"hyperaccel.ai/lpu": 4}, []string{"hyperaccel.ai/lpu-arc-4", "hyperaccel.ai/lpu-arc-4-claims"}},
		// What Kueue can count for a claim template: one device of the
		// class, mapped to the 4-arc resource of queues.yaml (quota 2).
		{"dra-claim-template", claimPod("lpu-arc-4"), map[string]int64{"hyperaccel.ai/lpu-arc-4-claims": 1}, []string{"hyperaccel.ai/lpu"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e.threeJobs(t, tc.name, tc.spec, tc.usage, tc.absent)
		})
	}

	// A single LPU is one LPU: lpu-arc-1 claims share the LPU quota.
	t.Run("dra-claim-template-single", func(t *testing.T) {
		job := e.createJob(t, "single", claimPod("lpu-arc-1"))
		wl := e.waitWorkload(t, job, admitWait, "admitted", admitted)
		checkUsage(t, wl, map[string]int64{"hyperaccel.ai/lpu": 1}, nil)
		e.deleteJobs(t, job)
	})

	// firstAvailable (the best-effort templates): Kueue v0.17 refuses to
	// count it, and the job stays suspended.
	t.Run("dra-best-effort-refused", func(t *testing.T) {
		job := e.createJob(t, "best-effort", claimPod("lpu-4-best-effort"))
		wl := e.waitWorkload(t, job, admitWait, "refused", func(wl *unstructured.Unstructured) bool {
			c := condition(wl, "QuotaReserved")
			return c != nil && c["status"] == "False" && c["reason"] == "Inadmissible"
		})
		msg := condition(wl, "QuotaReserved")["message"]
		if !strings.Contains(fmt.Sprint(msg), "FirstAvailable device selection is not supported") {
			t.Errorf("best-effort job: QuotaReserved message %q, want Kueue's FirstAvailable refusal", msg)
		}
		if !e.suspended(t, job) {
			t.Errorf("best-effort job %s runs without quota", job.Name)
		}
		t.Logf("best-effort job %s refused: %v", job.Name, msg)
		e.deleteJobs(t, job)
	})
}

// threeJobs creates three jobs of spec, waits until two are admitted and
// the third is held for lack of quota, ends the first admitted one and
// waits until the third is admitted; then it deletes them all and waits
// until their workloads are gone.
func (e *env) threeJobs(t *testing.T, name string, spec func() corev1.PodSpec, usage map[string]int64, absent []string) {
	begin := time.Now()
	var jobs []*batchv1.Job
	for _, s := range []string{"a", "b", "c"} {
		jobs = append(jobs, e.createJob(t, name+"-"+s, spec))
	}
	var first, held *batchv1.Job
	when := map[string]time.Duration{}
	daemontest.WaitFor(t, admitWait, name+": two jobs admitted, one held for quota", func() bool {
		var in, out []*batchv1.Job
		for _, j := range jobs {
			wl := e.workload(t, j)
			switch {
			case wl == nil:
				return false
			case admitted(wl):
				if _, ok := when[j.Name]; !ok {
					when[j.Name] = time.Since(begin)
				}
				in = append(in, j)
			case heldForQuota(wl):
				out = append(out, j)
			}
		}
		if len(in) > 2 {
			t.Fatalf("%s: all three jobs admitted on a quota for two", name)
		}
		if len(in) == 2 && len(out) == 1 {
			first, held = in[0], out[0]
			if when[in[1].Name] < when[first.Name] {
				first = in[1]
			}
			return true
		}
		return false
	}, e.kueue)
	for _, j := range jobs {
		wl := e.workload(t, j)
		if j == held {
			t.Logf("%s: %s held at %v: %v", name, j.Name, time.Since(begin).Round(time.Millisecond), condition(wl, "QuotaReserved")["message"])
			if !e.suspended(t, j) {
				t.Errorf("%s: held job %s is not suspended", name, j.Name)
			}
			if pods := e.pods(t, j); len(pods) != 0 {
				t.Errorf("%s: held job %s has pods %v", name, j.Name, pods)
			}
			continue
		}
		t.Logf("%s: %s admitted at %v", name, j.Name, when[j.Name].Round(time.Millisecond))
		checkUsage(t, wl, usage, absent)
		daemontest.WaitFor(t, admitWait, j.Name+" unsuspended", func() bool { return !e.suspended(t, j) }, e.kueue)
	}

	ended := e.finish(t, first)
	wl := e.waitWorkload(t, held, admitWait, "admitted after "+first.Name+" ended", admitted)
	t.Logf("%s: %s finished at %v; %s admitted %v later", name, first.Name, ended.Sub(begin).Round(time.Millisecond),
		held.Name, time.Since(ended).Round(time.Millisecond))
	if f := condition(e.workload(t, first), "Finished"); f == nil || f["status"] != "True" {
		t.Errorf("%s: workload of the finished job %s is not Finished: %v", name, first.Name, f)
	}
	checkUsage(t, wl, usage, absent)

	e.deleteJobs(t, jobs...)
}

// start brings up the control plane, Kueue's CRDs and manager with the
// shipped configuration, the shipped queues, and the chart's DRA classes
// and claim templates.
func start(t *testing.T, dir string) *env {
	t.Helper()
	c := clustertest.Start(t, clustertest.Options{Scheduler: true, ControllerManager: true})
	e := &env{cs: kubernetes.NewForConfigOrDie(c.Config), dyn: dynamic.NewForConfigOrDie(c.Config)}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(discovery.NewDiscoveryClientForConfigOrDie(c.Config)))

	crds, err := filepath.Glob(filepath.Join(dir, "crds", "*.yaml"))
	if err != nil || len(crds) == 0 {
		t.Fatalf("kueue CRDs in %s: %v", dir, err)
	}
	for _, f := range crds {
		docs := readDocs(t, f)
		for _, d := range docs {
			withConversionWebhook(t, d)
		}
		e.apply(t, mapper, docs, nil)
	}
	daemontest.WaitFor(t, kueueStart, "kueue CRDs established", func() bool {
		list, err := e.dyn.Resource(crdGVR).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false
		}
		n := 0
		for i := range list.Items {
			if strings.HasSuffix(list.Items[i].GetName(), ".kueue.x-k8s.io") && condition(&list.Items[i], "Established")["status"] == "True" {
				n++
			}
		}
		return n == len(crds)
	})
	mapper.Reset()

	// The manager's own namespace and the Secret its certificate rotator
	// fills (Kueue's install ships both).
	ctx := context.Background()
	if _, err := e.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kueue-system"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "kueue-webhook-server-cert", Namespace: "kueue-system"}}
	if _, err := e.cs.CoreV1().Secrets("kueue-system").Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	work := t.TempDir()
	ports, err := daemontest.FreePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	health := daemontest.Loopback(ports[0])
	cfgPath := filepath.Join(work, "kueue-config.yaml")
	writeConfig(t, cfgPath, filepath.Join(work, "certs"), health, ports[1])
	e.kueue = daemontest.Start(t, work, "kueue", filepath.Join(dir, "kueue"), []string{"KUBECONFIG=" + c.Kubeconfig},
		"--config", cfgPath, "--zap-log-level=3")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- end of kueue log:\n%s", e.kueue.Tail(40))
		}
	})
	certDir := filepath.Join(work, "certs")
	daemontest.WaitFor(t, kueueStart, "kueue /readyz", func() bool {
		mountSecret(t, e.cs, certDir)
		resp, err := http.Get("http://" + health + "/readyz")
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, e.kueue)

	// The chart's DeviceClasses and claim templates, as rendered.
	e.apply(t, mapper, readDocs(t, filepath.Join(repoRoot, "deploy/manifests/lpu-node-dra.yaml")), map[string]bool{"DeviceClass": true, "ResourceClaimTemplate": true})
	e.apply(t, mapper, readDocs(t, filepath.Join(repoRoot, "deploy/kueue/queues.yaml")), nil)
	daemontest.WaitFor(t, kueueStart, "ClusterQueue lpu active", func() bool {
		cq, err := e.dyn.Resource(clusterQueueGVR).Get(ctx, queueName, metav1.GetOptions{})
		return err == nil && condition(cq, "Active")["status"] == "True"
	}, e.kueue)
	return e
}

// mountSecret does what the kubelet's secret volume does for Kueue's pod:
// once the certificate rotator has filled the Secret, its certificate and
// key appear in certDir, where the rotator waits for them.
func mountSecret(t *testing.T, cs kubernetes.Interface, certDir string) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(certDir, "tls.key")); err == nil {
		return
	}
	s, err := cs.CoreV1().Secrets("kueue-system").Get(context.Background(), "kueue-webhook-server-cert", metav1.GetOptions{})
	if err != nil || len(s.Data["tls.crt"]) == 0 || len(s.Data["tls.key"]) == 0 {
		return
	}
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		t.Fatal(err)
	}
	// the key last: its presence says both are there
	for _, f := range []string{"ca.crt", "tls.crt", "tls.key"} {
		if err := os.WriteFile(filepath.Join(certDir, f), s.Data[f], 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// converted are the CRDs Kueue's install serves conversions for, and
// whose CA bundle Kueue's certificate rotator injects (it is not ready
// until it has).
var converted = map[string]bool{
	"localqueues.kueue.x-k8s.io": true, "clusterqueues.kueue.x-k8s.io": true, "workloads.kueue.x-k8s.io": true,
	"cohorts.kueue.x-k8s.io": true, "multikueueclusters.kueue.x-k8s.io": true,
}

// withConversionWebhook gives crd the conversion webhook of Kueue's
// install (config/components/crd/patches/webhook_in_*.yaml). This test
// uses the storage version v1beta2 only, so the apiserver never calls it.
func withConversionWebhook(t *testing.T, crd *unstructured.Unstructured) {
	t.Helper()
	if !converted[crd.GetName()] {
		return
	}
	conv := map[string]any{
		"strategy": "Webhook",
		"webhook": map[string]any{
			"clientConfig": map[string]any{
				"service": map[string]any{"namespace": "kueue-system", "name": "kueue-webhook-service", "path": "/convert"},
			},
			"conversionReviewVersions": []any{"v1"},
		},
	}
	if err := unstructured.SetNestedMap(crd.Object, conv, "spec", "conversion"); err != nil {
		t.Fatal(err)
	}
}

// writeConfig writes Kueue's Configuration: deploy/kueue/config.yaml as
// shipped (resources, featureGates), plus what this test's process needs:
// loopback ports, no leader election, Jobs only. Webhooks: Kueue serves
// them on loopback with the certificate its internal rotator makes, but
// they are not registered with the apiserver, which reaches webhooks
// through a Service this control plane cannot route (no cluster DNS or
// service proxy, and an EndpointSlice may not point at loopback); the jobs
// are created suspended, as Kueue's Job webhook would make them.
func writeConfig(t *testing.T, path, certDir, health string, webhookPort int) {
	t.Helper()
	docs := readDocs(t, filepath.Join(repoRoot, "deploy/kueue/config.yaml"))
	if len(docs) != 1 || docs[0].GetKind() != "Configuration" {
		t.Fatalf("deploy/kueue/config.yaml: want one Configuration, have %d documents", len(docs))
	}
	cfg := docs[0].Object
	for key := range cfg {
		if key != "apiVersion" && key != "kind" && key != "resources" && key != "featureGates" {
			t.Fatalf("deploy/kueue/config.yaml sets %q; the docs tell operators to merge resources and featureGates only", key)
		}
	}
	gates, _ := cfg["featureGates"].(map[string]any)
	if gates == nil {
		gates = map[string]any{}
	}
	gates["VisibilityOnDemand"] = false // it would listen on every address
	cfg["featureGates"] = gates
	cfg["namespace"] = "kueue-system"
	cfg["health"] = map[string]any{"healthProbeBindAddress": health}
	cfg["metrics"] = map[string]any{"bindAddress": "0"}
	cfg["webhook"] = map[string]any{"host": "127.0.0.1", "port": webhookPort, "certDir": certDir}
	cfg["leaderElection"] = map[string]any{"leaderElect": false}
	cfg["internalCertManagement"] = map[string]any{"enable": true}
	cfg["integrations"] = map[string]any{"frameworks": []any{"batch/job"}}
	b, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// readDocs parses a multi-document YAML file into objects.
func readDocs(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []*unstructured.Unstructured
	for _, doc := range bytes.Split(b, []byte("\n---")) {
		var m map[string]any
		if err := yaml.Unmarshal(doc, &m); err != nil {
			t.Fatalf("parse %s: %v", path, err)
		}
		if len(m) > 0 {
			out = append(out, &unstructured.Unstructured{Object: m})
		}
	}
	return out
}

// apply creates objs (those of kinds, when kinds is set).
func (e *env) apply(t *testing.T, mapper meta.RESTMapper, objs []*unstructured.Unstructured, kinds map[string]bool) {
	t.Helper()
	for _, o := range objs {
		if kinds != nil && !kinds[o.GetKind()] {
			continue
		}
		gvk := o.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatalf("%s %s: %v", gvk.Kind, o.GetName(), err)
		}
		r := e.dyn.Resource(m.Resource)
		var ri dynamic.ResourceInterface = r
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			ri = r.Namespace(cmpOr(o.GetNamespace(), ns))
		}
		if _, err := ri.Create(context.Background(), o, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s %s: %v", gvk.Kind, o.GetName(), err)
		}
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// createNode registers a node of the device-plugin mode with lpus LPUs.
func (e *env) createNode(t *testing.T, name string, lpus int64) {
	t.Helper()
	ctx := context.Background()
	if _, err := e.cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	res := corev1.ResourceList{
		"hyperaccel.ai/lpu":   *resource.NewQuantity(lpus, resource.DecimalSI),
		corev1.ResourceCPU:    resource.MustParse("64"),
		corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	// The controller-manager writes the new node too (taints, CIDR): retry
	// on its updates.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := e.cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Status.Capacity, n.Status.Allocatable = res, res
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now()}}
		_, err = e.cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("node %s status: %v", name, err)
	}
}

// limitsPod asks n of an extended resource in limits, as the docs' pods
// do, and in requests too when requests is set.
func limitsPod(name string, n int64, requests bool) func() corev1.PodSpec {
	return func() corev1.PodSpec {
		res := corev1.ResourceList{corev1.ResourceName(name): *resource.NewQuantity(n, resource.DecimalSI)}
		c := corev1.Container{Name: "main", Image: "lpu-job:test", Resources: corev1.ResourceRequirements{Limits: res}}
		if requests {
			c.Resources.Requests = res
		}
		return corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{c}}
	}
}

// claimPod asks for a claim from one of the chart's claim templates.
func claimPod(template string) func() corev1.PodSpec {
	return func() corev1.PodSpec {
		return corev1.PodSpec{
			RestartPolicy:  corev1.RestartPolicyNever,
			ResourceClaims: []corev1.PodResourceClaim{{Name: "lpus", ResourceClaimTemplateName: ptr.To(template)}},
			Containers: []corev1.Container{{Name: "main", Image: "lpu-job:test", Resources: corev1.ResourceRequirements{
				Claims: []corev1.ResourceClaim{{Name: "lpus"}},
			}}},
		}
	}
}

// createJob creates a one-pod Job in the LocalQueue, suspended as Kueue's
// webhook would make it.
func (e *env) createJob(t *testing.T, name string, spec func() corev1.PodSpec) *batchv1.Job {
	t.Helper()
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"kueue.x-k8s.io/queue-name": queueName}},
		Spec: batchv1.JobSpec{
			Suspend:      ptr.To(true),
			Parallelism:  ptr.To[int32](1),
			Completions:  ptr.To[int32](1),
			BackoffLimit: ptr.To[int32](0),
			Template:     corev1.PodTemplateSpec{Spec: spec()},
		},
	}
	created, err := e.cs.BatchV1().Jobs(ns).Create(context.Background(), job, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create job %s: %v", name, err)
	}
	return created
}

func (e *env) suspended(t *testing.T, job *batchv1.Job) bool {
	t.Helper()
	j, err := e.cs.BatchV1().Jobs(ns).Get(context.Background(), job.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get job %s: %v", job.Name, err)
	}
	return ptr.Deref(j.Spec.Suspend, false)
}

// workload returns the Workload Kueue made for job, or nil before it has.
func (e *env) workload(t *testing.T, job *batchv1.Job) *unstructured.Unstructured {
	t.Helper()
	list, err := e.dyn.Resource(workloadGVR).Namespace(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list workloads: %v", err)
	}
	for i := range list.Items {
		for _, o := range list.Items[i].GetOwnerReferences() {
			if o.UID == job.UID {
				return &list.Items[i]
			}
		}
	}
	return nil
}

// waitWorkload waits, within budget, until job's Workload satisfies ok.
func (e *env) waitWorkload(t *testing.T, job *batchv1.Job, budget time.Duration, what string, ok func(*unstructured.Unstructured) bool) *unstructured.Unstructured {
	t.Helper()
	var wl *unstructured.Unstructured
	daemontest.WaitFor(t, budget, job.Name+" "+what, func() bool {
		wl = e.workload(t, job)
		return wl != nil && ok(wl)
	}, e.kueue)
	return wl
}

// finish ends job as the kubelet would report its pod: Succeeded. The
// job controller then completes the Job, and Kueue finishes its workload
// and releases its quota. It returns when the pod's status was written.
func (e *env) finish(t *testing.T, job *batchv1.Job) time.Time {
	t.Helper()
	ctx := context.Background()
	var pod corev1.Pod
	daemontest.WaitFor(t, admitWait, job.Name+"'s pod created", func() bool {
		pods := e.pods(t, job)
		if len(pods) == 0 {
			return false
		}
		pod = pods[0]
		return true
	}, e.kueue)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := e.cs.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		p.Status.Phase = corev1.PodSucceeded
		_, err = e.cs.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("pod %s succeeded: %v", pod.Name, err)
	}
	return time.Now()
}

// pods lists the pods the job controller made for job.
func (e *env) pods(t *testing.T, job *batchv1.Job) []corev1.Pod {
	t.Helper()
	pods, err := e.cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + job.Name})
	if err != nil {
		t.Fatalf("list pods of %s: %v", job.Name, err)
	}
	return pods.Items
}

// deleteJobs deletes jobs and their workloads (the garbage collector
// would, but it learns of a new CRD only on its next rediscovery, up to
// 30 s later) and waits until they are gone, so the next case starts from
// an empty quota.
func (e *env) deleteJobs(t *testing.T, jobs ...*batchv1.Job) {
	t.Helper()
	ctx := context.Background()
	background := metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}
	for _, j := range jobs {
		if wl := e.workload(t, j); wl != nil {
			err := e.dyn.Resource(workloadGVR).Namespace(ns).Delete(ctx, wl.GetName(), background)
			if err != nil && !apierrors.IsNotFound(err) {
				t.Fatalf("delete workload %s: %v", wl.GetName(), err)
			}
		}
		err := e.cs.BatchV1().Jobs(ns).Delete(ctx, j.Name, background)
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatalf("delete job %s: %v", j.Name, err)
		}
	}
	daemontest.WaitFor(t, drainWait, "workloads of deleted jobs gone", func() bool {
		for _, j := range jobs {
			if e.workload(t, j) != nil {
				return false
			}
		}
		return true
	}, e.kueue)
}

func admitted(wl *unstructured.Unstructured) bool {
	return condition(wl, "Admitted")["status"] == "True"
}

// heldForQuota: Kueue tried the workload and found the quota used up.
func heldForQuota(wl *unstructured.Unstructured) bool {
	c := condition(wl, "QuotaReserved")
	return c != nil && c["status"] == "False" && strings.Contains(fmt.Sprint(c["message"]), "insufficient unused quota")
}

// condition returns the status condition of type typ, or nil.
func condition(obj *unstructured.Unstructured, typ string) map[string]any {
	conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == typ {
			return m
		}
	}
	return nil
}

// checkUsage compares what Kueue counted for the admitted workload with
// want, and checks that none of absent was counted.
func checkUsage(t *testing.T, wl *unstructured.Unstructured, want map[string]int64, absent []string) {
	t.Helper()
	psa, _, _ := unstructured.NestedSlice(wl.Object, "status", "admission", "podSetAssignments")
	if len(psa) != 1 {
		t.Fatalf("workload %s: %d pod set assignments, want 1", wl.GetName(), len(psa))
	}
	usage, _, _ := unstructured.NestedStringMap(psa[0].(map[string]any), "resourceUsage")
	for name, n := range want {
		q, err := resource.ParseQuantity(usage[name])
		if err != nil || q.Value() != n {
			t.Errorf("workload %s: counted %s=%q, want %d (usage %v)", wl.GetName(), name, usage[name], n, usage)
		}
	}
	for _, name := range absent {
		if _, ok := usage[name]; ok {
			t.Errorf("workload %s: counted %s too (usage %v)", wl.GetName(), name, usage)
		}
	}
	t.Logf("workload %s counted %v", wl.GetName(), usage)
}

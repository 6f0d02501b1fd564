package main

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	sigsyaml "sigs.k8s.io/yaml"

	lpuconfig "github.com/hyperaccel/lpu-node/config"
	"github.com/hyperaccel/lpu-node/internal/clustertest"
)

// Scheduler profiles: the default one and one scoring MostAllocated on the
// LPU count, a profile an operator could pick for packing.
const (
	profileDefault = "default-scheduler"
	profileMost    = "most-allocated"
)

// LPUResource is the device plugin's count resource.
const LPUResource corev1.ResourceName = "hyperaccel.ai/lpu"

// schedulerConfig is kube-scheduler's configuration: client rate limits
// high enough not to be what is measured, retry backoff of 1 s (the
// churn's time unit is several seconds), and the two profiles.
// score, when above 0, is percentageOfNodesToScore: how many nodes (in
// percent) the scheduler looks for as feasible before it stops filtering.
func schedulerConfig(kubeconfig string, score int) string {
	pct := ""
	if score > 0 {
		pct = "percentageOfNodesToScore: " + strconv.Itoa(score) + "\n"
	}
	return `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: ` + kubeconfig + `
  qps: 500
  burst: 1000
leaderElection:
  leaderElect: false
podInitialBackoffSeconds: 1
podMaxBackoffSeconds: 1
` + pct + `profiles:
  - schedulerName: ` + profileDefault + `
  - schedulerName: ` + profileMost + `
    pluginConfig:
      - name: NodeResourcesFit
        args:
          scoringStrategy:
            type: MostAllocated
            resources:
              - name: ` + string(LPUResource) + `
                weight: 1
`
}

// startControlPlane runs etcd, kube-apiserver, kube-controller-manager and
// kube-scheduler in dir. Nodes have no kubelet, so the apiserver must not
// taint new nodes not-ready (TaintNodesByCondition) and the node-lifecycle
// controller must not taint them unreachable and evict.
// With workload the Workload API and gang scheduling are on
// (docs/dra.md, "Jobs that span servers").
func startControlPlane(ctx context.Context, dir string, bins clustertest.Binaries, score int, profiling, workload bool, logf func(string, ...any)) (*clustertest.Cluster, error) {
	cfg := filepath.Join(dir, "scheduler.yaml")
	// clustertest writes the scheduler's kubeconfig at this path before
	// starting it; with --config the scheduler reads it from the file only.
	if err := os.WriteFile(cfg, []byte(schedulerConfig(filepath.Join(dir, "kube-scheduler.kubeconfig"), score)), 0o600); err != nil {
		return nil, fmt.Errorf("write %s: %w", cfg, err)
	}
	var gate []string
	if workload {
		gate = []string{"--feature-gates=GenericWorkload=true"}
	}
	return clustertest.New(ctx, clustertest.Options{
		Dir:               dir,
		Binaries:          bins,
		Scheduler:         true,
		ControllerManager: true,
		Timeout:           4 * time.Minute,
		Logf:              logf,
		APIServerFlags: append([]string{
			"--disable-admission-plugins=TaintNodesByCondition",
			"--max-requests-inflight=800", "--max-mutating-requests-inflight=400",
		}, append(gate, workloadRuntimeConfig(workload)...)...),
		ControllerManagerFlags: append([]string{
			"--controllers=*,-node-lifecycle-controller",
			"--kube-api-qps=300", "--kube-api-burst=600",
		}, gate...),
		// The later --profiling wins over clustertest's --profiling=false.
		SchedulerFlags: append([]string{"--config", cfg, "--profiling=" + strconv.FormatBool(profiling)}, gate...),
	})
}

// refused names the object the API server would not take, prints it and
// the server's reason.
func refused(what string, obj any, err error) error {
	b, _ := sigsyaml.Marshal(obj)
	reason := err.Error()
	if st, ok := err.(apierrors.APIStatus); ok {
		reason = fmt.Sprintf("%s (%s, code %d)", st.Status().Message, st.Status().Reason, st.Status().Code)
	}
	return fmt.Errorf("the API server refused %s: %s\n--- rejected object:\n%s", what, reason, b)
}

// nodeStatus is a Ready node with lpus advertised as the device plugin
// does (0: none, the DRA arms).
func nodeStatus(lpus int) corev1.NodeStatus {
	res := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("64"),
		corev1.ResourceMemory: resource.MustParse("512Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	if lpus > 0 {
		res[LPUResource] = *resource.NewQuantity(int64(lpus), resource.DecimalSI)
	}
	now := metav1.Now()
	return corev1.NodeStatus{
		Capacity:    res,
		Allocatable: res.DeepCopy(),
		Conditions: []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			Message: "played by the cluster harness", LastHeartbeatTime: now, LastTransitionTime: now,
		}},
	}
}

// createNodes registers the Node objects, Ready and untainted.
func createNodes(ctx context.Context, cs kubernetes.Interface, nodes []*simNode) error {
	return parallel(ctx, len(nodes), 8, func(i int) error {
		n := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: nodes[i].name, Labels: map[string]string{
				"kubernetes.io/hostname": nodes[i].name, "lpu.hyperaccel.ai/rings": strconv.Itoa(len(nodes[i].inv.Rings)),
			}},
			Status: nodeStatus(0),
		}
		if _, err := cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			return refused("node "+n.Name, n, err)
		}
		// The status given at create is not kept; set it, retrying when a
		// controller (ttl, ipam) updated the node in between.
		return updateNodeStatus(ctx, cs, n.Name, n.Status)
	})
}

// updateNodeStatus writes a node's status on its latest version.
func updateNodeStatus(ctx context.Context, cs kubernetes.Interface, name string, status corev1.NodeStatus) error {
	var last *corev1.Node
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Status = status
		last = n
		_, err = cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return refused("status of node "+name, last, err)
	}
	return nil
}

// setLPUCapacity makes every node advertise lpus per ring (device-plugin
// arms) or nothing (DRA arms: never both over the same LPUs).
func setLPUCapacity(ctx context.Context, cs kubernetes.Interface, nodes []*simNode, dp bool) error {
	return parallel(ctx, len(nodes), 8, func(i int) error {
		lpus := 0
		if dp {
			lpus = len(nodes[i].inv.Devices)
		}
		return updateNodeStatus(ctx, cs, nodes[i].name, nodeStatus(lpus))
	})
}

// shipped are the DRA objects the project ships, read from the rendered
// manifest: the DeviceClasses, the ResourceClaimTemplates (lpu-arc-<k>,
// lpu-<k>-best-effort) and the arc sizes lpu-dra publishes (the config's
// dra.arcSizes, empty: every arc).
type shipped struct {
	classes   []*resourceapi.DeviceClass
	templates map[string]*resourceapi.ResourceClaimTemplate
	arcSizes  []int
	// prefilter is the chart's prefilter policy, its bindings and the
	// ConfigMap of parameters they name, for the prefilter arms (policy
	// nil: the manifest has none).
	prefilter struct {
		policy   *admissionv1.MutatingAdmissionPolicy
		bindings []*admissionv1.MutatingAdmissionPolicyBinding
		params   *corev1.ConfigMap
	}
}

// loadShipped reads the DeviceClasses, the ResourceClaimTemplates, the
// prefilter MutatingAdmissionPolicy with its bindings and parameters (if
// any) and the lpu-dra config of the rendered DRA manifest. It fails unless every size
// in sizes has its strict template and, above 1, its best-effort one.
func loadShipped(path string, sizes []int) (*shipped, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read manifest: %w", err)
	}
	out := &shipped{templates: map[string]*resourceapi.ResourceClaimTemplate{}}
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	sawConfig := false
	for {
		var raw map[string]any
		if err := dec.Decode(&raw); err != nil {
			if err.Error() == "EOF" {
				break
			}
			return nil, fmt.Errorf("parse %s: %w", path, err)
		}
		kind, _ := raw["kind"].(string)
		doc, _ := sigsyaml.Marshal(raw)
		config, err := out.add(kind, doc)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		sawConfig = sawConfig || config
	}
	if !sawConfig {
		return nil, fmt.Errorf("%s: no ConfigMap with config.yaml (lpu-dra's config)", path)
	}
	if err := out.complete(sizes); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}

// strictly decodes doc as a T, naming kind in the error.
func strictly[T any](doc []byte, kind string) (*T, error) {
	var v T
	if err := sigsyaml.UnmarshalStrict(doc, &v); err != nil {
		return nil, fmt.Errorf("%s: %w", kind, err)
	}
	return &v, nil
}

// add takes one manifest document of kind; config reports whether it was
// the ConfigMap holding lpu-dra's config.yaml.
func (s *shipped) add(kind string, doc []byte) (config bool, err error) {
	switch kind {
	case "DeviceClass":
		dc, err := strictly[resourceapi.DeviceClass](doc, kind)
		if err == nil {
			s.classes = append(s.classes, dc)
		}
		return false, err
	case "ResourceClaimTemplate":
		t, err := strictly[resourceapi.ResourceClaimTemplate](doc, kind)
		if err == nil {
			s.templates[t.Name] = t
		}
		return false, err
	case "MutatingAdmissionPolicy":
		p, err := strictly[admissionv1.MutatingAdmissionPolicy](doc, kind)
		if err == nil && strings.HasSuffix(p.Name, prefilterPolicySuffix) {
			s.prefilter.policy = p
		}
		return false, err
	case "MutatingAdmissionPolicyBinding":
		b, err := strictly[admissionv1.MutatingAdmissionPolicyBinding](doc, kind)
		if err == nil {
			s.prefilter.bindings = append(s.prefilter.bindings, b)
		}
		return false, err
	case "ConfigMap":
		cm, err := strictly[corev1.ConfigMap](doc, kind)
		if err != nil {
			return false, err
		}
		if strings.HasSuffix(cm.Name, policyParamsSuffix) {
			s.prefilter.params = cm
			return false, nil
		}
		body, ok := cm.Data["config.yaml"]
		if !ok {
			return false, nil
		}
		cfg, err := lpuconfig.Parse([]byte(body))
		if err != nil {
			return false, fmt.Errorf("ConfigMap %s config.yaml: %w", cm.Name, err)
		}
		s.arcSizes = cfg.DRA.ArcSizes
		return true, nil
	}
	return false, nil
}

// complete keeps the prefilter policy's own bindings (it must have one)
// and checks that every size has its templates.
func (s *shipped) complete(sizes []int) error {
	if p := s.prefilter.policy; p != nil {
		s.prefilter.bindings = slices.DeleteFunc(s.prefilter.bindings, func(b *admissionv1.MutatingAdmissionPolicyBinding) bool {
			return b.Spec.PolicyName != p.Name
		})
		if len(s.prefilter.bindings) == 0 {
			return fmt.Errorf("no MutatingAdmissionPolicyBinding of %s", p.Name)
		}
		if p.Spec.ParamKind != nil && s.prefilter.params == nil {
			return fmt.Errorf("no ConfigMap *%s of parameters for %s", policyParamsSuffix, p.Name)
		}
	}
	for _, k := range sizes {
		for _, be := range []bool{false, true} {
			if name := templateName(k, be); s.templates[name] == nil {
				return fmt.Errorf("no ResourceClaimTemplate %s", name)
			}
		}
	}
	return nil
}

// templateName is the claim template a pod of size k uses; a best-effort
// 1-arc is the strict one.
func templateName(size int, bestEffort bool) string {
	if bestEffort && size > 1 {
		return "lpu-" + strconv.Itoa(size) + "-best-effort"
	}
	return "lpu-arc-" + strconv.Itoa(size)
}

// installDRA creates the shipped DeviceClasses and claim templates.
func installDRA(ctx context.Context, cs kubernetes.Interface, s *shipped) error {
	for _, dc := range s.classes {
		if _, err := cs.ResourceV1().DeviceClasses().Create(ctx, dc, metav1.CreateOptions{}); err != nil {
			return refused("DeviceClass "+dc.Name, dc, err)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(s.templates)) {
		t := s.templates[name].DeepCopy()
		t.Namespace, t.ResourceVersion = namespace, ""
		if _, err := cs.ResourceV1().ResourceClaimTemplates(namespace).Create(ctx, t, metav1.CreateOptions{}); err != nil {
			return refused("ResourceClaimTemplate "+t.Name, t, err)
		}
	}
	return nil
}

// waitServiceAccount waits for the controller-manager to create the
// namespace's default ServiceAccount, which pod admission needs.
func waitServiceAccount(ctx context.Context, cs kubernetes.Interface) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		_, err := cs.CoreV1().ServiceAccounts(namespace).Get(ctx, "default", metav1.GetOptions{})
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for serviceaccount %s/default: %w (last: %v)", namespace, ctx.Err(), err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

package prom

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"sigs.k8s.io/yaml"

	"github.com/hyperaccel/lpu-node/internal/daemontest"
	"github.com/hyperaccel/lpu-node/internal/kubelettest"
	"github.com/hyperaccel/lpu-node/internal/nritest"
	"github.com/hyperaccel/lpu-node/internal/podresources/podresourcestest"
	"github.com/hyperaccel/lpu-node/pkg/device"
)

// testFor replaces every `for:` of the rendered rules in the live test: the
// faults are held seconds, not the minutes the shipped rules wait. Only
// `for:` changes; expressions, windows and labels are the chart's.
const testFor = "3s"

// TestMain removes the daemons' build directory.
func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// shortenFor returns the rule file with every `for:` set to testFor.
func shortenFor(t *testing.T, rules []byte) []byte {
	t.Helper()
	var doc struct {
		Groups []map[string]any `json:"groups"`
	}
	if err := yaml.Unmarshal(rules, &doc); err != nil {
		t.Fatal(err)
	}
	for _, g := range doc.Groups {
		rs, _ := g["rules"].([]any)
		for _, r := range rs {
			if m, ok := r.(map[string]any); ok {
				if _, has := m["for"]; has {
					m["for"] = testFor
				}
			}
		}
	}
	out, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// node is one simulated LPU node of a chart mode: the daemons of the mode
// on a simulated tree of 8 LPUs, the NRI runtime lpu-nri serves, and a
// Prometheus scraping them with the chart's rules. In mode devicePlugin
// the kubelet's Registration and PodResources services stand in for the
// kubelet: the test allocates through the plugin's socket and records the
// holders PodResources then lists, as the kubelet would after admitting a
// pod.
type node struct {
	mode, dir, state string
	kubelet          *kubelettest.Kubelet
	podResources     *podresourcestest.Server
	holdings         []podresourcestest.Holding
	runtime          *nritest.Runtime
	prom             *promServer
	procs            []*daemontest.Proc
	plugin           *kubelettest.Client
}

// config writes the daemons' config file: kubelet paths under root, fast
// health probes, strict allocation (so a non-contiguous offer is refused).
func writeConfig(t *testing.T, dir, root string) string {
	t.Helper()
	return writeFile(t, dir, "config.yaml", []byte(fmt.Sprintf(`version: v1
kubelet:
  rootDir: %s
allocation:
  policy: strict
health:
  pollInterval: 100ms
  probeInterval: 20ms
`, root)))
}

// startNode starts the mode's daemons, the NRI runtime and Prometheus, and
// waits until Prometheus scrapes every daemon.
func startNode(t *testing.T, mode string) *node {
	t.Helper()
	prometheus(t) // skips before any build when it is absent
	bin := daemons(t)
	n := &node{mode: mode, dir: daemontest.ShortDir(t)}
	n.state = filepath.Join(n.dir, "state")
	root := filepath.Join(n.dir, "kubelet")
	for _, d := range []string{n.state, root} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cfg := writeConfig(t, n.dir, root)
	n.runtime = nritest.New(t)
	n.runtime.Start(t)
	env := []string{"NODE_NAME=node-a", "LPU_LOG_FORMAT=text"}
	// the simulated node, written once by lpu-nri simulate as the chart's
	// init container does; every daemon is given it as its root
	simRoot := filepath.Join(n.state, "simulated-node")
	if out, err := exec.Command(filepath.Join(bin, "lpu-nri"), "simulate", "--config", cfg, "--root", simRoot, "--lpus", "8").CombinedOutput(); err != nil {
		t.Fatalf("lpu-nri simulate: %v\n%s", err, out)
	}
	common := []string{"--config", cfg, "--root", simRoot, "--state-dir", n.state}
	allocator, nri := daemontest.FreeAddr(t), daemontest.FreeAddr(t)
	var targets []target
	pod := map[string]string{"namespace": "kube-system", "pod": "lpu-node-test"}
	withContainer := func(c string) map[string]string {
		m := map[string]string{"container": c}
		for k, v := range pod {
			m[k] = v
		}
		return m
	}
	if mode == modeDevicePlugin {
		n.startKubelet(t, root)
		n.procs = append(n.procs, daemontest.Start(t, n.dir, "lpu-device-plugin", filepath.Join(bin, "lpu-device-plugin"), env,
			append(common, "--metrics-addr", allocator, "--injection", "nri")...))
		targets = append(targets, target{allocator, withContainer("device-plugin")})
	} else {
		kc := writeFile(t, n.dir, "kubeconfig", []byte(deadKubeconfig))
		n.procs = append(n.procs, daemontest.Start(t, n.dir, "lpu-dra", filepath.Join(bin, "lpu-dra"), env,
			append(common, "--metrics-addr", allocator, "--node-name", "node-a", "--kubeconfig", kc)...))
		// lpu-dra runs in its own DaemonSet, so its own pod
		dra := withContainer("lpu-dra")
		dra["pod"] = "lpu-node-dra-test"
		targets = append(targets, target{allocator, dra})
	}
	n.procs = append(n.procs, daemontest.Start(t, n.dir, "lpu-nri", filepath.Join(bin, "lpu-nri"), env,
		append(common, "--metrics-addr", nri, "--nri-socket", n.runtime.Socket, "--mode", "nri")...))
	targets = append(targets, target{nri, withContainer("lpu-nri")})

	rules := writeFile(t, n.dir, "rules.yaml", shortenFor(t, renderedRules(t, mode)))
	settings := chartScrape(t, mode)[0]
	config, err := promConfig(settings, rules, targets)
	if err != nil {
		t.Fatal(err)
	}
	n.prom = startPrometheus(t, n.dir, config)
	n.procs = append(n.procs, n.prom.p)
	daemontest.WaitFor(t, 30*time.Second, "every target up", func() bool {
		up := n.prom.query(t, `up{job="lpu-node"} == 1`)
		return len(up) == len(targets)
	}, n.procs...)
	daemontest.WaitFor(t, 30*time.Second, "lpu-nri connected to the runtime", func() bool {
		return len(n.prom.query(t, `lpu_nri_connected == 1`)) == 1
	}, n.procs...)
	// The rules run from Prometheus' start, before its first scrape, so
	// LPUMetricsAbsent (3 s for:) may fire then; it resolves at the first
	// evaluation after lpu-nri's target is scraped.
	daemontest.WaitFor(t, 10*time.Second, "LPUMetricsAbsent resolved once lpu-nri is scraped", func() bool {
		return len(active(n.prom.alerts(t), "LPUMetricsAbsent", "")) == 0
	}, n.procs...)
	if mode == modeDevicePlugin {
		// the kubelet dials the plugin it registered and keeps its
		// ListAndWatch stream open
		n.plugin = n.kubelet.Dial(t, n.kubelet.WaitRegistration(t, 15*time.Second))
		n.plugin.Watch(t)
	}
	return n
}

// startKubelet serves the kubelet's Registration service on
// <root>/device-plugins/kubelet.sock and its PodResources service on
// <root>/pod-resources/kubelet.sock until the test ends.
func (n *node) startKubelet(t *testing.T, root string) {
	t.Helper()
	plugins, podResources := filepath.Join(root, "device-plugins"), filepath.Join(root, "pod-resources")
	for _, d := range []string{plugins, podResources} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	n.kubelet = kubelettest.Start(t, plugins)
	n.podResources = podresourcestest.Start(t, filepath.Join(podResources, "kubelet.sock"))
}

// hold records that container of namespace/pod holds ids, as the kubelet's
// PodResources lists it once the pod is admitted.
func (n *node) hold(namespace, pod, container string, ids []string) {
	n.holdings = append(n.holdings, podresourcestest.Holding{Namespace: namespace, Pod: pod, Container: container,
		Resource: "hyperaccel.ai/lpu", DeviceIDs: ids})
	n.podResources.SetPods(n.holdings...)
}

// deadKubeconfig points lpu-dra at a port nobody serves: it still starts,
// discovers and exports its series (the API server is not under test).
const deadKubeconfig = `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "http://127.0.0.1:1"}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
users: [{name: u, user: {}}]
current-context: c
`

// active returns the alerts named name in state (pending or firing).
func active(as []alert, name, state string) []alert {
	var out []alert
	for _, a := range as {
		if a.Labels["alertname"] == name && (state == "" || a.State == state) {
			out = append(out, a)
		}
	}
	return out
}

// waitAlert waits until alert name is firing with the labels want; when
// pending, Prometheus must have shown it pending first (its `for:`, testFor
// here, lasts many polls). It returns how long firing took.
func (n *node) waitAlert(t *testing.T, name string, pending bool, want map[string]string) time.Duration {
	t.Helper()
	begin := time.Now()
	matches := func(a alert) bool {
		for k, v := range want {
			if a.Labels[k] != v {
				return false
			}
		}
		return true
	}
	sawPending := false
	daemontest.WaitFor(t, 60*time.Second, name+" firing", func() bool {
		for _, a := range active(n.prom.alerts(t), name, "") {
			if !matches(a) {
				continue
			}
			sawPending = sawPending || a.State == "pending"
			if a.State == "firing" {
				return true
			}
		}
		return false
	}, n.procs...)
	took := time.Since(begin)
	if pending && !sawPending {
		t.Errorf("%s fired without being pending first", name)
	}
	t.Logf("%s pending %v, firing %v after the fault (%v)", name, sawPending, took.Round(100*time.Millisecond), want)
	return took
}

// quiet checks for d that no alert is pending or firing except allowed.
func (n *node) quiet(t *testing.T, d time.Duration, allowed ...string) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		for _, a := range n.prom.alerts(t) {
			if !slices.Contains(allowed, a.Labels["alertname"]) {
				t.Fatalf("alert %s %s on a healthy node: %v", a.Labels["alertname"], a.State, a.Labels)
			}
		}
	}
}

// setAttr writes one attribute file of an LPU in the simulated sysfs tree.
func (n *node) setAttr(t *testing.T, id, name, value string) {
	t.Helper()
	p := filepath.Join(n.state, "simulated-node", device.ClassDir, id, name)
	if err := os.WriteFile(p, []byte(value+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// allocate asks the device plugin for ids as the kubelet does for one
// container and returns the container annotations it answers.
func (n *node) allocate(t *testing.T, ids ...string) (map[string]string, error) {
	t.Helper()
	resp, err := n.plugin.Allocate(context.Background(), &pluginapi.AllocateRequest{
		ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}})
	if err != nil {
		return nil, err
	}
	return resp.ContainerResponses[0].Annotations, nil
}

// create runs CreateContainer for container name of pod namespace/pod
// through the runtime, with container and pod annotations.
func (n *node) create(t *testing.T, pod, name string, ctrAnn, podAnn map[string]string) error {
	t.Helper()
	p := &api.PodSandbox{Id: "sb-" + pod, Name: pod, Uid: "uid-" + pod, Namespace: "default", Annotations: podAnn}
	c := &api.Container{Id: "ctr-" + pod + "-" + name, PodSandboxId: p.Id, Name: name, Annotations: ctrAnn}
	_, err := n.runtime.CreateContainer(context.Background(), p, c)
	return err
}

// TestLiveAlertsDevicePlugin: mode devicePlugin on a simulated node, scraped
// by the real Prometheus with the chart's rules: silent while healthy and
// while every allocation is injected; each injected fault raises its alert
// (pending, then firing); every dashboard query returns data.
func TestLiveAlertsDevicePlugin(t *testing.T) {
	n := startNode(t, modeDevicePlugin)
	begin := time.Now()
	n.quiet(t, 4*time.Second)

	// Two containers served end to end: allocated, held, injected.
	for i, ids := range [][]string{{"lpu0", "lpu1"}, {"lpu2", "lpu3", "lpu4", "lpu5"}} {
		ann, err := n.allocate(t, ids...)
		if err != nil {
			t.Fatal(err)
		}
		pod := fmt.Sprintf("job-%d", i)
		n.hold("default", pod, "main", ids)
		if err := n.create(t, pod, "main", ann, nil); err != nil {
			t.Fatalf("CreateContainer %s: %v", pod, err)
		}
		time.Sleep(3 * time.Second)
	}
	daemontest.WaitFor(t, 10*time.Second, "2 injections and 6 allocated LPUs in Prometheus", func() bool {
		inj := n.prom.query(t, `lpu_nri_injections_total`)
		alloc := n.prom.query(t, `sum(lpu_device_allocated)`)
		return len(inj) == 1 && inj[0].value() == 2 && len(alloc) == 1 && alloc[0].value() == 6
	}, n.procs...)
	n.quiet(t, 5*time.Second)
	n.checkHonorLabels(t)

	// Allocations the runtime never created: not injected.
	for range 2 {
		if _, err := n.allocate(t, "lpu6", "lpu7"); err != nil {
			t.Fatal(err)
		}
	}
	n.waitAlert(t, "LPUAllocationsNotInjected", true, map[string]string{"namespace": "kube-system", "pod": "lpu-node-test"})

	// A non-contiguous offer under allocation.policy strict.
	if _, err := n.allocate(t, "lpu6", "lpu0"); err == nil {
		t.Fatal("strict policy allocated a non-contiguous set")
	}
	n.waitAlert(t, "LPUStrictRefusals", false, map[string]string{"namespace": "kube-system", "pod": "lpu-node-test"})

	n.faultsBothModes(t)
	n.checkDashboard(t)
	n.plot(t, begin)
	n.injectorDown(t)
}

// TestLiveAlertsDRA: mode dra (lpu-dra and lpu-nri) on a simulated node.
// lpu-dra runs without an API server: it discovers and exports the device
// series, but no claim is prepared.
func TestLiveAlertsDRA(t *testing.T) {
	n := startNode(t, modeDRA)
	n.quiet(t, 4*time.Second)
	n.faultsBothModes(t)
	n.checkDashboard(t)
	n.injectorDown(t)
}

// faultsBothModes injects the faults every mode alerts on: a pod forging
// the device plugin's annotations, an LPU turning unhealthy in sysfs, and
// the runtime going away under lpu-nri.
func (n *node) faultsBothModes(t *testing.T) {
	t.Helper()
	err := n.create(t, "forger", "main", nil, map[string]string{"lpu.hyperaccel.ai/devices": "lpu0,lpu1"})
	if err == nil || !strings.Contains(err.Error(), "reserved") {
		t.Fatalf("forged pod annotation: CreateContainer = %v, want a refusal", err)
	}
	n.waitAlert(t, "LPURefusalsRising", true, map[string]string{"reason": "pod-annotation", "pod": "lpu-node-test"})

	n.setAttr(t, "lpu3", "status", "ECC_ERROR")
	took := n.waitAlert(t, "LPUDeviceUnhealthy", true, map[string]string{"device": "lpu3", "node": "node-a", "severity": "warning"})
	if took < 3*time.Second {
		t.Errorf("LPUDeviceUnhealthy fired %v after the fault, before its for: %s", took, testFor)
	}
	if as := active(n.prom.alerts(t), "LPUDeviceUnhealthy", ""); len(as) != 1 {
		t.Fatalf("LPUDeviceUnhealthy alerts %v, want lpu3's only", as)
	}

	// lpu5 at 97 °C: above both thresholds
	n.setAttr(t, "lpu5", device.AttrTemperature, "97000")
	n.waitAlert(t, "LPUTemperatureHigh", true, map[string]string{"device": "lpu5", "node": "node-a", "severity": "warning"})
	// pending during the wait above, unseen: both rules share the 3 s for:
	n.waitAlert(t, "LPUTemperatureCritical", false, map[string]string{"device": "lpu5", "node": "node-a", "severity": "critical"})
	for _, name := range []string{"LPUTemperatureHigh", "LPUTemperatureCritical"} {
		if as := active(n.prom.alerts(t), name, ""); len(as) != 1 {
			t.Errorf("%s alerts %v, want lpu5's only", name, as)
		}
	}

	n.runtime.Stop()
	n.waitAlert(t, "LPUInjectorDisconnected", true, map[string]string{"pod": "lpu-node-test", "severity": "critical"})
}

// injectorDown stops the lpu-nri process, as a crash-looping container
// leaves its target: LPUMetricsTargetDown fires for lpu-nri's target only.
// It runs last, after the dashboard queries that need lpu-nri's series.
func (n *node) injectorDown(t *testing.T) {
	t.Helper()
	i := slices.IndexFunc(n.procs, func(p *daemontest.Proc) bool { return p.Name == "lpu-nri" })
	if i < 0 {
		t.Fatal("no lpu-nri process")
	}
	n.procs[i].Stop()
	n.procs = slices.Delete(n.procs, i, i+1)
	n.waitAlert(t, "LPUMetricsTargetDown", true, map[string]string{"container": "lpu-nri", "pod": "lpu-node-test", "severity": "critical"})
	if as := active(n.prom.alerts(t), "LPUMetricsTargetDown", ""); len(as) != 1 {
		t.Errorf("LPUMetricsTargetDown alerts %v, want lpu-nri's only", as)
	}
}

// checkHonorLabels: with the chart's honorLabels, a held device's
// telemetry keeps its holder's pod instead of the scrape target's.
func (n *node) checkHonorLabels(t *testing.T) {
	t.Helper()
	got := n.prom.query(t, `lpu_temperature_celsius{device="lpu0"}`)
	if len(got) != 1 || got[0].Metric["pod"] != "job-0" || got[0].Metric["namespace"] != "default" {
		t.Fatalf("lpu0's temperature series %v, want the holder's pod default/job-0 kept", got)
	}
}

package tests_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/hyperaccel/lpu-node/config"
	"github.com/hyperaccel/lpu-node/deploy/charttest"
	"github.com/hyperaccel/lpu-node/internal/metricsserver"
)

// chartCase is one rendering of the chart and what it must contain.
type chartCase struct {
	sets            []string
	kinds           []string // object kinds, in order
	mode            string   // config injection.mode after loading
	cdiMount        bool     // lpu-nri mounts the CDI spec dir
	simulate        int
	networkTable    string
	nriPodResource  bool // lpu-nri mounts the pod-resources dir
	noNFD           bool // nfd.enabled=false: no feature file, no mount
	doctorMounts    bool // nri.doctor.hostMounts=true
	knobs           bool // the "every optional knob" case
	driverMountType corev1.HostPathType
	scrapers        []string // namespaces the NetworkPolicy admits; nil: [monitoring]
	extraPeers      int      // networkPolicy.extraFrom entries
	noNetworkPolicy bool
}

const nfdDir = "/etc/kubernetes/node-feature-discovery/features.d"

// gateKinds are the runtime gate's policies and bindings (cluster-scoped);
// their parameters, a ConfigMap, are listed as PolicyParams.
var gateKinds = []string{"MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}

var baseKinds = append([]string{"NetworkPolicy", "ServiceAccount", "ConfigMap", "PolicyParams", "ClusterRole", "ClusterRoleBinding", "DaemonSet"}, gateKinds...)

func chartCases() map[string]chartCase {
	return map[string]chartCase{
		"defaults": {kinds: baseKinds, mode: config.InjectionNRI},
		"cdi mode": {
			sets:  []string{"config.injection.mode=cdi"},
			kinds: baseKinds, mode: config.InjectionCDI, cdiMount: true,
		},
		"auto mode may fall back to cdi": {
			sets:  []string{"config.injection.mode=auto"},
			kinds: baseKinds, mode: config.InjectionAuto, cdiMount: true,
		},
		"without node feature discovery": {
			sets:  []string{"nfd.enabled=false"},
			kinds: baseKinds, mode: config.InjectionNRI, noNFD: true,
		},
		"every optional knob": {
			sets: []string{"commonLabels.team=ml", "podAnnotations.example\\.com/owner=ml",
				"imagePullSecrets[0].name=registry", "image.tag=v9.9.9",
				"devicePlugin.extraArgs[0]=--injection=nri",
				"nri.extraEnv[0].name=LPU_LOG_LEVEL", "nri.extraEnv[0].value=debug",
				"affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].key=hyperaccel.ai/lpu.model",
				"affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator=Exists",
				"metrics.service.enabled=true", "metrics.service.annotations.a=b"},
			kinds: append([]string{"NetworkPolicy", "ServiceAccount", "ConfigMap", "PolicyParams", "ClusterRole", "ClusterRoleBinding", "Service", "DaemonSet"}, gateKinds...), mode: config.InjectionNRI,
			knobs: true,
		},
		"two driver mounts, checked as directories": {
			sets: []string{"config.injection.mounts[0].hostPath=/usr/lib/lpu",
				"config.injection.mounts[1].hostPath=/opt/lpu/bin", "config.injection.mounts[1].containerPath=/usr/local/bin/lpu",
				"nri.driverMountType=Directory"},
			kinds: baseKinds, mode: config.InjectionNRI, driverMountType: corev1.HostPathDirectory,
		},
		"no driver mounts": {
			sets:  []string{"json:config.injection.mounts=[]"},
			kinds: baseKinds, mode: config.InjectionNRI,
		},
		"doctor host mounts": {
			sets:  []string{"nri.doctor.hostMounts=true"},
			kinds: baseKinds, mode: config.InjectionNRI, doctorMounts: true,
		},
		"service monitor": {
			sets:  []string{"metrics.serviceMonitor.enabled=true", "metrics.serviceMonitor.labels.release=prom"},
			kinds: []string{"NetworkPolicy", "ServiceAccount", "ConfigMap", "PolicyParams", "ClusterRole", "ClusterRoleBinding", "Service", "DaemonSet", "MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding", "ServiceMonitor", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"},
			mode:  config.InjectionNRI,
		},
		"service only": {
			sets:  []string{"metrics.service.enabled=true"},
			kinds: append([]string{"NetworkPolicy", "ServiceAccount", "ConfigMap", "PolicyParams", "ClusterRole", "ClusterRoleBinding", "Service", "DaemonSet"}, gateKinds...),
			mode:  config.InjectionNRI,
		},
		"simulated node with a network table and pod-resources check": {
			sets: []string{"simulate=8", "config.topology.networkTable=/etc/lpu/links.csv",
				"config.topology.source=table", "config.kubelet.podResourcesCheck=true"},
			kinds: baseKinds, mode: config.InjectionNRI,
			simulate: 8, networkTable: "/etc/lpu/links.csv", nriPodResource: true,
		},
		"network policy for other namespaces": {
			sets:  []string{"json:networkPolicy.monitoringNamespaces=[\"prom\",\"obs\"]", "json:networkPolicy.extraFrom=[{\"ipBlock\":{\"cidr\":\"10.0.0.0/8\"}}]"},
			kinds: baseKinds, mode: config.InjectionNRI, scrapers: []string{"prom", "obs"}, extraPeers: 1,
		},
		"no network policy": {
			sets:  []string{"networkPolicy.enabled=false"},
			kinds: append([]string{"ServiceAccount", "ConfigMap", "PolicyParams", "ClusterRole", "ClusterRoleBinding", "DaemonSet"}, gateKinds...), mode: config.InjectionNRI, noNetworkPolicy: true,
		},
		"runtime guard in nri mode": {
			sets:  []string{"config.security.runtimeGuard=true"},
			kinds: baseKinds, mode: config.InjectionNRI, cdiMount: true,
		},
		"no runtime gate": {
			sets:  []string{"runtimeGate.enabled=false"},
			kinds: []string{"NetworkPolicy", "ServiceAccount", "ConfigMap", "ClusterRole", "ClusterRoleBinding", "DaemonSet"}, mode: config.InjectionNRI,
		},
		"other state dir and sockets, strict policy": {
			sets: []string{"config.stateDir=/srv/lpu", "config.nri.socket=/run/nri2/nri.sock",
				"config.kubelet.devicePluginDir=/data/kubelet/device-plugins",
				"config.kubelet.podResourcesSocket=/data/kubelet/pod-resources/kubelet.sock",
				"config.allocation.policy=strict", "serviceAccount.create=false"},
			kinds: append([]string{"NetworkPolicy", "ConfigMap", "PolicyParams", "ClusterRole", "ClusterRoleBinding", "DaemonSet"}, gateKinds...), mode: config.InjectionNRI,
		},
	}
}

func TestChartRender(t *testing.T) {
	helm := charttest.Helm(t)
	for name, tc := range chartCases() {
		t.Run(name, func(t *testing.T) {
			objs := decode(t, charttest.Render(t, helm, tc.sets...))
			if !reflect.DeepEqual(objs.Kinds, tc.kinds) {
				t.Fatalf("kinds = %v, want %v", objs.Kinds, tc.kinds)
			}
			cfg := loadConfigMap(t, objs.ConfigMap)
			if cfg.Injection.Mode != tc.mode {
				t.Errorf("config injection.mode = %q, want %q", cfg.Injection.Mode, tc.mode)
			}
			if cfg.Root != "/host" {
				t.Errorf("config root = %q, want /host (the host's /sys and /dev are mounted there)", cfg.Root)
			}
			checkDaemonSet(t, objs, cfg, tc)
			checkMetricsObjects(t, objs)
			checkNetworkPolicy(t, objs, tc)
			if tc.knobs {
				checkKnobs(t, objs)
			}
			for _, m := range []interface{ GetNamespace() string }{objs.DaemonSet, objs.ConfigMap} {
				if m.GetNamespace() != namespace {
					t.Errorf("namespace = %q, want %q", m.GetNamespace(), namespace)
				}
			}
		})
	}
}

// loadConfigMap writes the rendered config to a file and loads it with the
// daemons' own loader, which rejects unknown fields and bad values.
func loadConfigMap(t *testing.T, cm *corev1.ConfigMap) *config.Config {
	t.Helper()
	body, ok := cm.Data["config.yaml"]
	if !ok || len(cm.Data) != 1 {
		t.Fatalf("ConfigMap data keys = %v, want only config.yaml", slices.Sorted(maps.Keys(cm.Data)))
	}
	if !strings.HasPrefix(body, "version: v1\n") {
		t.Errorf("config.yaml does not start with version: v1:\n%s", body)
	}
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(p)
	if err != nil {
		t.Fatalf("config.Load of the rendered ConfigMap: %v\n%s", err, body)
	}
	return cfg
}

// hostMount is a hostPath volume as one container sees it.
type hostMount struct {
	MountPath string
	ReadOnly  bool
	Type      corev1.HostPathType
}

func checkDaemonSet(t *testing.T, objs objects, cfg *config.Config, tc chartCase) {
	t.Helper()
	ds := objs.DaemonSet
	pod := ds.Spec.Template.Spec
	for k, v := range ds.Spec.Selector.MatchLabels {
		if ds.Spec.Template.Labels[k] != v {
			t.Errorf("selector %s=%s does not match the pod labels %v", k, v, ds.Spec.Template.Labels)
		}
	}
	if pod.PriorityClassName != "system-node-critical" {
		t.Errorf("priorityClassName = %q", pod.PriorityClassName)
	}
	if pod.HostNetwork || pod.HostPID || pod.HostIPC {
		t.Errorf("host namespaces: network=%v pid=%v ipc=%v, want none", pod.HostNetwork, pod.HostPID, pod.HostIPC)
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Error("the service account token is mounted in every container; only lpu-device-plugin reads the API (its Node)")
	}
	if objs.ServiceAccount != nil && pod.ServiceAccountName != objs.ServiceAccount.Name {
		t.Errorf("serviceAccountName = %q, want the chart's %q", pod.ServiceAccountName, objs.ServiceAccount.Name)
	}
	checkDevicePluginRBAC(t, objs, pod.ServiceAccountName)
	ann := ds.Spec.Template.Annotations
	if ann["checksum/config"] == "" {
		t.Error("no checksum/config annotation: config changes would not roll the pods")
	}
	if ann["tolerate-missing-plugins.noderesource.dev"] != "true" {
		t.Errorf("pod annotations %v lack the NRI validator toleration; with containerd-2.x.toml lpu-nri could never start", ann)
	}

	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = v
	}
	names := []string{}
	for _, c := range pod.Containers {
		names = append(names, c.Name)
	}
	if !reflect.DeepEqual(names, []string{"lpu-device-plugin", "lpu-nri"}) {
		t.Fatalf("containers = %v, want lpu-device-plugin and lpu-nri", names)
	}
	checkSimulateInit(t, pod.InitContainers, cfg.StateDir, tc.simulate)

	root := cfg.Root
	common := map[string]hostMount{
		"/sys":       {root + "/sys", true, corev1.HostPathDirectory},
		"/dev":       {root + "/dev", true, corev1.HostPathDirectory},
		cfg.StateDir: {cfg.StateDir, false, corev1.HostPathDirectoryOrCreate},
	}
	if tc.networkTable != "" {
		common[tc.networkTable] = hostMount{root + tc.networkTable, true, corev1.HostPathFile}
	}
	podResDir := path.Dir(cfg.Kubelet.PodResourcesSocket)
	want := map[string]map[string]hostMount{
		"lpu-device-plugin": with(common, map[string]hostMount{
			cfg.Kubelet.DevicePluginDir: {cfg.Kubelet.DevicePluginDir, false, corev1.HostPathDirectoryOrCreate},
			podResDir:                   {podResDir, true, corev1.HostPathDirectoryOrCreate},
		}),
		"lpu-nri": with(common, map[string]hostMount{
			path.Dir(cfg.NRI.Socket): {path.Dir(cfg.NRI.Socket), true, corev1.HostPathDirectoryOrCreate},
			// lpu-nri doctor's NRI plugin index check.
			"/opt/nri/plugins": {"/opt/nri/plugins", true, corev1.HostPathDirectoryOrCreate},
		}),
	}
	if tc.cdiMount {
		want["lpu-nri"][cfg.CDI.SpecDir] = hostMount{cfg.CDI.SpecDir, false, corev1.HostPathDirectoryOrCreate}
	}
	if tc.nriPodResource {
		want["lpu-nri"][podResDir] = hostMount{podResDir, true, corev1.HostPathDirectoryOrCreate}
	}
	if cfg.Injection.Mode == config.InjectionAuto {
		// The device plugin resolves auto by looking for the NRI socket.
		nriDir := path.Dir(cfg.NRI.Socket)
		want["lpu-device-plugin"][nriDir] = hostMount{nriDir, true, corev1.HostPathDirectoryOrCreate}
	}
	for _, m := range cfg.Injection.Mounts {
		want["lpu-nri"][m.HostPath] = hostMount{root + m.HostPath, true, tc.driverMountType}
	}
	if tc.doctorMounts {
		want["lpu-nri"][cfg.Kubelet.DevicePluginDir] = hostMount{cfg.Kubelet.DevicePluginDir, true, corev1.HostPathDirectoryOrCreate}
	}
	if !tc.noNFD {
		want["lpu-device-plugin"][nfdDir] = hostMount{nfdDir, false, corev1.HostPathDirectoryOrCreate}
	}

	for _, c := range pod.Containers {
		t.Run(c.Name, func(t *testing.T) {
			checkContainer(t, c, tc)
			got := map[string]hostMount{}
			configMounted, tokenMounted := false, false
			for _, m := range c.VolumeMounts {
				v, ok := volumes[m.Name]
				if !ok {
					t.Errorf("mount %s: no volume %q", m.MountPath, m.Name)
					continue
				}
				switch {
				case v.HostPath != nil:
					typ := corev1.HostPathUnset
					if v.HostPath.Type != nil {
						typ = *v.HostPath.Type
					}
					key := v.HostPath.Path
					if _, dup := got[key]; dup {
						key += "@" + m.MountPath // a second view of the same host path
					}
					got[key] = hostMount{m.MountPath, m.ReadOnly, typ}
					if m.MountPropagation != nil && *m.MountPropagation != corev1.MountPropagationNone {
						t.Errorf("mount %s: propagation %s", m.MountPath, *m.MountPropagation)
					}
				case v.ConfigMap != nil:
					configMounted = v.ConfigMap.Name == objs.ConfigMap.Name && m.MountPath == "/etc/lpu" && m.ReadOnly
				case v.Projected != nil:
					// The token reads the Node's cordoned LPUs: the device
					// plugin's alone, read-only, where client-go looks.
					if c.Name != "lpu-device-plugin" || !m.ReadOnly || m.MountPath != "/var/run/secrets/kubernetes.io/serviceaccount" ||
						len(v.Projected.Sources) == 0 || v.Projected.Sources[0].ServiceAccountToken == nil {
						t.Errorf("%s: projected mount %s (read-only %v) %+v: want the service account token in lpu-device-plugin only",
							c.Name, m.MountPath, m.ReadOnly, v.Projected)
					}
					tokenMounted = true
				default:
					t.Errorf("mount %s: unexpected volume source %+v", m.MountPath, v.VolumeSource)
				}
			}
			if !configMounted {
				t.Errorf("ConfigMap %s not mounted read-only at /etc/lpu", objs.ConfigMap.Name)
			}
			if tokenMounted != (c.Name == "lpu-device-plugin") {
				t.Errorf("%s: service account token mounted = %v", c.Name, tokenMounted)
			}
			if !reflect.DeepEqual(got, want[c.Name]) {
				t.Errorf("host mounts (host path -> in container):\n got %s\nwant %s", fmtMounts(got), fmtMounts(want[c.Name]))
			}
			_, hasCDI := got["/var/run/cdi"]
			if hasCDI != tc.cdiMount && c.Name == "lpu-nri" {
				t.Errorf("/var/run/cdi mounted = %v, want %v (only when lpu-nri may write CDI specs)", hasCDI, tc.cdiMount)
			}
		})
	}
	// The state dir is the same host directory at the same path in both
	// containers: the seal key and the readiness socket are shared there.
	for _, c := range pod.Containers {
		found := false
		for _, m := range c.VolumeMounts {
			if v := volumes[m.Name]; v.HostPath != nil && v.HostPath.Path == cfg.StateDir && m.MountPath == cfg.StateDir {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: state dir %s not mounted from the host at the same path", c.Name, cfg.StateDir)
		}
	}
	for name, v := range volumes {
		if v.HostPath == nil {
			continue
		}
		used := false
		for _, c := range pod.Containers {
			for _, m := range c.VolumeMounts {
				used = used || m.Name == name
			}
		}
		if !used {
			t.Errorf("hostPath volume %s (%s) is declared but not mounted", name, v.HostPath.Path)
		}
	}
}

// checkContainer checks one daemon container: command, flags, security
// context, probes on its metrics port, NODE_NAME.
func checkContainer(t *testing.T, c corev1.Container, tc chartCase) {
	t.Helper()
	if !reflect.DeepEqual(c.Command, []string{"/usr/bin/" + c.Name}) {
		t.Errorf("command = %v, want /usr/bin/%s", c.Command, c.Name)
	}
	if !slices.Contains(c.Args, "--config=/etc/lpu/config.yaml") {
		t.Errorf("args %v lack --config=/etc/lpu/config.yaml", c.Args)
	}
	wantRoot := ""
	if tc.simulate > 0 {
		wantRoot = "--root=" + config.DefaultStateDir + "/simulated-node"
	}
	gotRoot := ""
	for _, a := range c.Args {
		if strings.HasPrefix(a, "--root") {
			gotRoot = a
		}
		if strings.HasPrefix(a, "--simulate") {
			t.Errorf("arg %q: the daemons take no simulate flag", a)
		}
	}
	if gotRoot != wantRoot {
		t.Errorf("root flag = %q, want %q", gotRoot, wantRoot)
	}
	if c.Name == "lpu-device-plugin" {
		wantNFD := "--nfd-features-file=" + nfdDir + "/lpu"
		if tc.noNFD {
			wantNFD = "--nfd-features-file="
		}
		if !slices.Contains(c.Args, wantNFD) {
			t.Errorf("args %v lack %s", c.Args, wantNFD)
		}
	}

	sc := c.SecurityContext
	switch {
	case sc == nil:
		t.Fatal("no securityContext")
	case sc.Privileged != nil && *sc.Privileged:
		t.Error("privileged")
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Error("allowPrivilegeEscalation is not false")
	case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		t.Error("readOnlyRootFilesystem is not true")
	case sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) > 0:
		t.Errorf("capabilities = %+v, want drop ALL and add none", sc.Capabilities)
	case sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
		t.Errorf("seccompProfile = %+v, want RuntimeDefault", sc.SeccompProfile)
	}

	// The metrics flag, the declared port and both probes agree.
	port := -1
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--metrics-addr=:"); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("bad metrics flag %q", a)
			}
			port = n
		}
	}
	if port <= 0 {
		t.Fatalf("args %v have no --metrics-addr=:PORT", c.Args)
	}
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	for kind, probe := range map[string]*corev1.Probe{"/healthz": c.LivenessProbe, "/readyz": c.ReadinessProbe} {
		if probe == nil || probe.HTTPGet == nil {
			t.Errorf("no httpGet probe for %s", kind)
			continue
		}
		if probe.HTTPGet.Path != kind {
			t.Errorf("probe path = %s, want %s", probe.HTTPGet.Path, kind)
		}
		if got := ports[probe.HTTPGet.Port.String()]; int(got) != port {
			t.Errorf("probe %s on port %q = %d, metrics flag says %d", kind, probe.HTTPGet.Port.String(), got, port)
		}
	}

	fromField := map[string]string{} // env name: the pod field it is set from
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			fromField[e.Name] = e.ValueFrom.FieldRef.FieldPath
		}
	}
	if fromField["NODE_NAME"] != "spec.nodeName" {
		t.Error("NODE_NAME is not set from spec.nodeName")
	}
	// The metrics port keeps the node's addresses, where the kubelet
	// probes from, slots of their own.
	if fromField[metricsserver.HostIPsEnv] != "status.hostIPs" {
		t.Errorf("%s is not set from status.hostIPs", metricsserver.HostIPsEnv)
	}
	if c.Resources.Limits.Memory().IsZero() {
		t.Error("no memory limit")
	}
}

// checkKnobs checks that the optional values of the "every optional knob"
// case reach the objects.
func checkKnobs(t *testing.T, objs objects) {
	t.Helper()
	tpl := objs.DaemonSet.Spec.Template
	dp, nri := tpl.Spec.Containers[0], tpl.Spec.Containers[1]
	aff := tpl.Spec.Affinity
	checks := map[string]bool{
		"common label on DaemonSet":  objs.DaemonSet.Labels["team"] == "ml",
		"common label on pods":       tpl.Labels["team"] == "ml",
		"common label on ConfigMap":  objs.ConfigMap.Labels["team"] == "ml",
		"pod annotation":             tpl.Annotations["example.com/owner"] == "ml",
		"pull secret":                len(tpl.Spec.ImagePullSecrets) == 1 && tpl.Spec.ImagePullSecrets[0].Name == "registry",
		"image tag":                  dp.Image == "ghcr.io/hyperaccel/lpu-node:v9.9.9" && nri.Image == dp.Image,
		"extra arg":                  slices.Contains(dp.Args, "--injection=nri") && !slices.Contains(nri.Args, "--injection=nri"),
		"extra env":                  slices.ContainsFunc(nri.Env, func(e corev1.EnvVar) bool { return e.Name == "LPU_LOG_LEVEL" && e.Value == "debug" }),
		"affinity":                   aff != nil && aff.NodeAffinity != nil && aff.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil,
		"service annotation":         objs.Service.Annotations["a"] == "b",
		"selector ignores the extra": objs.DaemonSet.Spec.Selector.MatchLabels["team"] == "",
	}
	for name, ok := range checks {
		if !ok {
			t.Errorf("%s: not rendered", name)
		}
	}
}

// checkMetricsObjects checks that the Service selects the DaemonSet's pods on
// their metrics ports and the ServiceMonitor selects the Service.
// checkNetworkPolicy: the policy selects the pods and admits only the
// scraper namespaces, only on the two metrics container ports.
func checkNetworkPolicy(t *testing.T, objs objects, tc chartCase) {
	t.Helper()
	np := objs.NetworkPolicy
	if tc.noNetworkPolicy {
		if np != nil {
			t.Error("NetworkPolicy rendered although disabled")
		}
		return
	}
	if np == nil {
		t.Fatal("no NetworkPolicy")
	}
	pod := objs.DaemonSet.Spec.Template
	sel := np.Spec.PodSelector.MatchLabels
	if len(sel) == 0 {
		t.Fatal("NetworkPolicy selects every pod in the namespace")
	}
	for k, v := range sel {
		if pod.Labels[k] != v {
			t.Errorf("NetworkPolicy selector %s=%s does not select the pods (%v)", k, v, pod.Labels)
		}
	}
	if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) || len(np.Spec.Ingress) != 1 {
		t.Fatalf("policy types %v, %d ingress rules; want Ingress and one rule", np.Spec.PolicyTypes, len(np.Spec.Ingress))
	}
	rule := np.Spec.Ingress[0]
	var metricsPorts []int32
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			metricsPorts = append(metricsPorts, p.ContainerPort)
		}
	}
	var ports []int32
	for _, p := range rule.Ports {
		if p.Protocol == nil || *p.Protocol != corev1.ProtocolTCP || p.Port == nil {
			t.Errorf("rule port %+v: want TCP with a port", p)
			continue
		}
		ports = append(ports, p.Port.IntVal)
	}
	if !slices.Equal(ports, metricsPorts) {
		t.Errorf("NetworkPolicy ports %v, want the metrics container ports %v", ports, metricsPorts)
	}
	want := tc.scrapers
	if want == nil {
		want = []string{"monitoring"}
	}
	if len(rule.From) != 1+tc.extraPeers {
		t.Fatalf("%d peers, want %d", len(rule.From), 1+tc.extraPeers)
	}
	ns := rule.From[0].NamespaceSelector
	if ns == nil || rule.From[0].PodSelector != nil || len(ns.MatchExpressions) != 1 || len(ns.MatchLabels) != 0 {
		t.Fatalf("first peer %+v: want one namespace selector expression", rule.From[0])
	}
	e := ns.MatchExpressions[0]
	if e.Key != "kubernetes.io/metadata.name" || e.Operator != metav1.LabelSelectorOpIn || !slices.Equal(e.Values, want) {
		t.Errorf("namespace selector %+v, want kubernetes.io/metadata.name In %v", e, want)
	}
}

func checkMetricsObjects(t *testing.T, objs objects) {
	t.Helper()
	if objs.ServiceMonitor != nil && objs.Service == nil {
		t.Fatal("ServiceMonitor without Service")
	}
	if objs.Service == nil {
		return
	}
	pod := objs.DaemonSet.Spec.Template
	for k, v := range objs.Service.Spec.Selector {
		if pod.Labels[k] != v {
			t.Errorf("Service selector %s=%s does not select the pods (%v)", k, v, pod.Labels)
		}
	}
	containerPorts := map[string]bool{}
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			containerPorts[p.Name] = true
		}
	}
	servicePorts := map[string]bool{}
	for _, p := range objs.Service.Spec.Ports {
		servicePorts[p.Name] = true
		if !containerPorts[p.TargetPort.String()] {
			t.Errorf("Service port %s targets %q, no such container port", p.Name, p.TargetPort.String())
		}
	}
	if len(servicePorts) != 2 {
		t.Errorf("Service ports = %v, want one per daemon", servicePorts)
	}
	sm := objs.ServiceMonitor
	if sm == nil {
		return
	}
	for k, v := range sm.Spec.Selector.MatchLabels {
		if objs.Service.Labels[k] != v {
			t.Errorf("ServiceMonitor selector %s=%s does not select the Service (%v)", k, v, objs.Service.Labels)
		}
	}
	if !slices.Equal(sm.Spec.NamespaceSelector.MatchNames, []string{namespace}) {
		t.Errorf("ServiceMonitor namespaces = %v", sm.Spec.NamespaceSelector.MatchNames)
	}
	if sm.Labels["release"] != "prom" {
		t.Errorf("ServiceMonitor labels = %v, want the extra release=prom", sm.Labels)
	}
	scraped := map[string]bool{}
	for _, e := range sm.Spec.Endpoints {
		scraped[e.Port] = true
		if e.Path != "/metrics" {
			t.Errorf("endpoint %s path %q", e.Port, e.Path)
		}
		if !e.HonorLabels {
			t.Errorf("endpoint %s without honorLabels: the holder's pod/namespace labels would become exported_*", e.Port)
		}
	}
	if !reflect.DeepEqual(scraped, servicePorts) {
		t.Errorf("ServiceMonitor scrapes %v, Service has %v", scraped, servicePorts)
	}
}

// TestChartRejectsBadValues: values.schema.json and the templates refuse
// values the daemons would refuse (or that would weaken the deployment),
// naming the key.
func TestChartRejectsBadValues(t *testing.T) {
	helm := charttest.Helm(t)
	tests := map[string]struct {
		set  string
		want string // substring of helm's error
	}{
		"injection mode":        {"config.injection.mode=runtime", "mode"},
		"allocation policy":     {"config.allocation.policy=lazy", "policy"},
		"topology source":       {"config.topology.source=guess", "source"},
		"unknown config field":  {"config.ringSize=8", "ringSize"},
		"unknown nested field":  {"config.nri.index=10", "index"},
		"unknown top-level key": {"hostNetwork=true", "hostNetwork"},
		"plugin index":          {"config.nri.pluginIndex=ab", "pluginIndex"},
		"log level":             {"config.log.level=verbose", "level"},
		"relative state dir":    {"config.stateDir=var/lib/lpu", "stateDir"},
		"root is /":             {"config.root=/", "config.root"},
		"duration":              {"config.health.resyncInterval=5", "resyncInterval"},
		"pull policy":           {"image.pullPolicy=Sometimes", "pullPolicy"},
		"short image digest":    {"image.digest=sha256:abc", "digest"},
		"image digest by tag":   {"image.digest=latest", "digest"},
		"metrics port":          {"nri.metricsPort=70000", "metricsPort"},
		"driver mount type":     {"nri.driverMountType=DirectoryOrCreate", "driverMountType"},
		"mounts removed":        {"config.injection.mounts=null", "mounts"},
		"tracing with a scheme": {"config.tracing.endpoint=http://otel:4317", "endpoint"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			out, err := charttest.RunHelm(t, helm, charttest.TemplateArgs(tc.set)...)
			if err == nil {
				t.Fatalf("helm template --set %s succeeded:\n%.400s", tc.set, out)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error does not name %q: %v", tc.want, err)
			}
		})
	}
}

// TestChartImageDigest: image.digest pins every container of every
// DaemonSet (the main one, a named node config's and lpu-dra's) to
// repository:tag@digest; without it they name the tag alone.
func TestChartImageDigest(t *testing.T) {
	helm := charttest.Helm(t)
	version, err := os.ReadFile("../VERSION")
	if err != nil {
		t.Fatal(err)
	}
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	byTag := "ghcr.io/hyperaccel/lpu-node:" + strings.TrimSpace(string(version))
	for want, sets := range map[string][]string{
		byTag + "@" + digest: {"image.digest=" + digest},
		byTag:                nil,
	} {
		sets = append(sets, "mode=dra", `json:nodeConfigs.configs={"ring4":{"allocation":{"policy":"strict"}}}`)
		o := decodeDRA(t, charttest.Render(t, helm, sets...))
		if len(o.DaemonSets) != 4 {
			t.Fatalf("%d DaemonSets, want the main one, lpu-dra and one of each per named config", len(o.DaemonSets))
		}
		for name, ds := range o.DaemonSets {
			spec := ds.Spec.Template.Spec
			for _, c := range append(spec.InitContainers, spec.Containers...) {
				if c.Image != want {
					t.Errorf("%v: DaemonSet %s container %s runs %q, want %q", sets, name, c.Name, c.Image, want)
				}
			}
		}
	}
}

func TestChartLint(t *testing.T) {
	helm := charttest.Helm(t)
	for name, sets := range map[string][]string{
		"defaults":              nil,
		"cdi":                   {"config.injection.mode=cdi", "metrics.serviceMonitor.enabled=true"},
		"nodeModes":             {"nodeModes.enabled=true", "metrics.serviceMonitor.enabled=true", "metrics.prometheusRule.enabled=true"},
		"nodeModes in mode dra": {"mode=dra", "nodeModes.enabled=true", "nodeConfigs.configs.ring4.allocation.policy=strict"},
	} {
		t.Run(name, func(t *testing.T) {
			args := []string{"lint", chartDir, "--strict", "--namespace", namespace}
			for _, s := range sets {
				args = append(args, "--set", s)
			}
			if out, err := charttest.RunHelm(t, helm, args...); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
		})
	}
}

// manifestsHeader is what deploy/render.sh writes above the rendering.
const manifestsHeader = `# Generated by deploy/render.sh from deploy/helm/lpu-node (default values,
# namespace kube-system, Kubernetes 1.37.2). Do not edit: change the chart and re-run render.sh.
`

// TestManifestsMatchChart: deploy/manifests/lpu-node.yaml is exactly the
// chart rendered with default values by deploy/render.sh.
func TestManifestsMatchChart(t *testing.T) {
	helm := charttest.Helm(t)
	got, err := os.ReadFile(manifestsFile)
	if err != nil {
		t.Fatal(err)
	}
	want := manifestsHeader + string(charttest.Render(t, helm))
	if string(got) != want {
		t.Errorf("%s is stale: run deploy/render.sh (first difference at byte %d)", manifestsFile, firstDiff(string(got), want))
	}
	decode(t, got) // and it decodes like any rendering
}

func firstDiff(a, b string) int {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestValuesMatchConfigTypes: the chart's config values and schema use
// exactly the YAML names of config.Config, so a renamed or added field in
// the config package breaks this test instead of the daemons at startup.
func TestValuesMatchConfigTypes(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var values struct {
		Config map[string]any `json:"config"`
	}
	if err := yaml.Unmarshal(raw, &values); err != nil {
		t.Fatal(err)
	}
	raw, err = os.ReadFile(filepath.Join(chartDir, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var schema map[string]any
	if err := json.Unmarshal(raw, &schema); err != nil {
		t.Fatalf("values.schema.json: %v", err)
	}
	cfgSchema, _ := digAny(schema, "properties", "config").(map[string]any)
	// version is written by the chart; metrics addresses are per-daemon
	// flags; dra comes from the dra values (dra.arcSizes, publishEveryArc).
	chartOwned := map[string]bool{"version": true, "metrics": true, "dra": true}
	compareFields(t, "config", reflect.TypeFor[config.Config](), values.Config, cfgSchema, chartOwned)
}

var durationType = reflect.TypeFor[config.Duration]()

// compareFields checks one struct level: the same names in the Go type, in
// the values (when given) and in the schema, recursing into nested structs.
func compareFields(t *testing.T, where string, typ reflect.Type, values map[string]any, schema map[string]any, skip map[string]bool) {
	t.Helper()
	if schema["additionalProperties"] != false {
		t.Errorf("schema %s: additionalProperties is not false", where)
	}
	props, _ := schema["properties"].(map[string]any)
	fields := map[string]reflect.Type{}
	for i := 0; i < typ.NumField(); i++ {
		f := typ.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" || skip[name] {
			continue
		}
		fields[name] = f.Type
	}
	for name := range props {
		if _, ok := fields[name]; !ok {
			t.Errorf("schema %s.%s: no such config field", where, name)
		}
	}
	for name := range values {
		if _, ok := fields[name]; !ok {
			t.Errorf("values %s.%s: no such config field", where, name)
		}
	}
	for name, ft := range fields {
		sub, ok := props[name].(map[string]any)
		if !ok {
			t.Errorf("schema %s: field %s missing", where, name)
			continue
		}
		if values != nil {
			if _, ok := values[name]; !ok {
				t.Errorf("values %s: field %s missing (list every field with its default)", where, name)
			}
		}
		subValues, _ := values[name].(map[string]any)
		switch {
		case ft == durationType:
		case ft.Kind() == reflect.Struct:
			compareFields(t, where+"."+name, ft, subValues, sub, nil)
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
			items, _ := sub["items"].(map[string]any)
			compareFields(t, where+"."+name+"[]", ft.Elem(), nil, items, nil)
		}
	}
}

func with(base, extra map[string]hostMount) map[string]hostMount {
	out := maps.Clone(base)
	maps.Copy(out, extra)
	return out
}

func fmtMounts(m map[string]hostMount) string {
	var parts []string
	for k, v := range m {
		mode := "rw"
		if v.ReadOnly {
			mode = "ro"
		}
		parts = append(parts, fmt.Sprintf("%s->%s(%s,%s)", k, v.MountPath, mode, v.Type))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

// checkSimulateInit: with simulate N the pod's one init container runs
// lpu-nri simulate for N LPUs at the root the daemons are given, with the
// state dir and the config mounted; without, the pod has none.
func checkSimulateInit(t *testing.T, inits []corev1.Container, stateDir string, n int) {
	t.Helper()
	if n == 0 {
		if len(inits) != 0 {
			t.Errorf("init containers %v without simulate", inits)
		}
		return
	}
	if len(inits) != 1 {
		t.Fatalf("%d init containers with simulate=%d, want 1", len(inits), n)
	}
	c := inits[0]
	wantArgs := []string{"--config=/etc/lpu/config.yaml", "--root=" + stateDir + "/simulated-node", fmt.Sprintf("--lpus=%d", n)}
	if !reflect.DeepEqual(c.Command, []string{"/usr/bin/lpu-nri", "simulate"}) || !reflect.DeepEqual(c.Args, wantArgs) {
		t.Errorf("init container runs %v %v, want lpu-nri simulate %v", c.Command, c.Args, wantArgs)
	}
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	if mounts["state"] != stateDir || mounts["config"] != "/etc/lpu" || len(mounts) != 2 {
		t.Errorf("init container mounts %v, want the state dir at %s and the config", mounts, stateDir)
	}
}

// checkDevicePluginRBAC checks that the pod's service account may read
// Nodes (the cordoned-LPU annotation of its own) and do nothing else.
func checkDevicePluginRBAC(t *testing.T, objs objects, account string) {
	t.Helper()
	role, b := objs.ClusterRole, objs.ClusterRoleBinding
	if role == nil || b == nil {
		t.Fatalf("cluster role %v, binding %v: want both", role, b)
	}
	want := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}}}
	if !reflect.DeepEqual(role.Rules, want) {
		t.Errorf("device plugin's rules %+v, want %+v", role.Rules, want)
	}
	if b.RoleRef.Name != role.Name || len(b.Subjects) != 1 || b.Subjects[0].Kind != "ServiceAccount" || b.Subjects[0].Name != account {
		t.Errorf("binding %+v, want %s bound to service account %s", b, role.Name, account)
	}
}

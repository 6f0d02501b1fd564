package tests_test

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/hyperaccel/lpu-node/config"
	"github.com/hyperaccel/lpu-node/deploy/charttest"
)

const nodeConfigLabel = "hyperaccel.ai/lpu.config"

// rendering is one `helm template` split by kind, strictly decoded; unlike
// decode it allows several DaemonSets (one per named node config).
type rendering struct {
	DaemonSets map[string]*appsv1.DaemonSet
	ConfigMap  *corev1.ConfigMap
	Rule       *NodeFeatureRule
}

// NodeFeatureRule is the part of NFD's nfd.k8s-sigs.io/v1alpha1
// NodeFeatureRule the chart renders; strict decoding fails on anything else.
type NodeFeatureRule struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Rules []struct {
			Name          string            `json:"name"`
			Labels        map[string]string `json:"labels"`
			MatchFeatures []featureMatcher  `json:"matchFeatures"`
			MatchAny      []struct {
				MatchFeatures []featureMatcher `json:"matchFeatures"`
			} `json:"matchAny"`
		} `json:"rules"`
	} `json:"spec"`
}

type featureMatcher struct {
	Feature          string `json:"feature"`
	MatchExpressions map[string]struct {
		Op    string   `json:"op"`
		Value []string `json:"value"`
	} `json:"matchExpressions"`
}

func renderSplit(t *testing.T, helm string, sets ...string) rendering {
	t.Helper()
	r := rendering{DaemonSets: map[string]*appsv1.DaemonSet{}}
	for i, tm := range charttest.Split(t, charttest.Render(t, helm, sets...)) {
		doc := tm.Text
		var err error
		switch tm.Kind {
		case "DaemonSet":
			ds := &appsv1.DaemonSet{}
			if err = yaml.UnmarshalStrict([]byte(doc), ds); err == nil {
				if r.DaemonSets[ds.Name] != nil {
					t.Fatalf("two DaemonSets named %s", ds.Name)
				}
				r.DaemonSets[ds.Name] = ds
			}
		case "ConfigMap":
			if !tm.IsPolicyParams() { // the daemons' configs, not the policies' parameters
				err = yaml.UnmarshalStrict([]byte(doc), &r.ConfigMap)
			}
		case "NodeFeatureRule":
			if tm.APIVersion != "nfd.k8s-sigs.io/v1alpha1" {
				t.Errorf("NodeFeatureRule apiVersion %s", tm.APIVersion)
			}
			err = yaml.UnmarshalStrict([]byte(doc), &r.Rule)
		}
		if err != nil {
			t.Fatalf("document %d (%s): strict decode: %v\n%s", i, tm.Kind, err, doc)
		}
	}
	return r
}

// schedulable says whether a DaemonSet's nodeSelector and required node
// affinity admit a node with these labels (In, NotIn, Exists,
// DoesNotExist evaluated by apimachinery's label selectors).
func schedulable(t *testing.T, ds *appsv1.DaemonSet, node map[string]string) bool {
	t.Helper()
	spec := ds.Spec.Template.Spec
	if !labels.SelectorFromSet(spec.NodeSelector).Matches(labels.Set(node)) {
		return false
	}
	if spec.Affinity == nil || spec.Affinity.NodeAffinity == nil || spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return true
	}
	for _, term := range spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		ls := &metav1.LabelSelector{}
		for _, e := range term.MatchExpressions {
			ls.MatchExpressions = append(ls.MatchExpressions, metav1.LabelSelectorRequirement{
				Key: e.Key, Operator: metav1.LabelSelectorOperator(e.Operator), Values: e.Values})
		}
		sel, err := metav1.LabelSelectorAsSelector(ls)
		if err != nil {
			t.Fatalf("%s: node selector term: %v", ds.Name, err)
		}
		if sel.Matches(labels.Set(node)) {
			return true
		}
	}
	return false
}

// TestChartNodeConfigs: each named node config gets a DaemonSet that runs
// only on nodes labelled with its name and reads its own ConfigMap key,
// holding the override merged over config; the default DaemonSet keeps its
// selector (immutable on upgrade) and stays off those nodes, so every LPU node
// runs exactly one.
func TestChartNodeConfigs(t *testing.T) {
	helm := charttest.Helm(t)
	r := renderSplit(t, helm,
		`json:nodeConfigs.configs={"ring4":{"allocation":{"policy":"strict"},"topology":{"source":"config","rings":[["lpu0","lpu1","lpu2","lpu3"]]}},"cdi-nodes":{"injection":{"mode":"cdi"}}}`,
		"affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].key=example.com/pool",
		"affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator=Exists")
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range r.DaemonSets {
			if !yield(n) {
				return
			}
		}
	})
	if want := []string{"lpu-node", "lpu-node-cdi-nodes", "lpu-node-ring4"}; !slices.Equal(names, want) {
		t.Fatalf("DaemonSets %v, want %v", names, want)
	}
	if r.ConfigMap == nil {
		t.Fatal("no ConfigMap")
	}
	load := func(key string) *config.Config {
		body, ok := r.ConfigMap.Data[key]
		if !ok {
			t.Fatalf("ConfigMap has no %s (keys %v)", key, r.ConfigMap.Data)
		}
		p := filepath.Join(t.TempDir(), key)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := config.Load(p)
		if err != nil {
			t.Fatalf("config.Load(%s): %v\n%s", key, err, body)
		}
		return cfg
	}
	base, ring4, cdi := load("config.yaml"), load("config-ring4.yaml"), load("config-cdi-nodes.yaml")
	if len(r.ConfigMap.Data) != 3 {
		t.Errorf("ConfigMap keys %d, want 3", len(r.ConfigMap.Data))
	}
	if base.Allocation.Policy != "best-effort" || ring4.Allocation.Policy != "strict" || cdi.Allocation.Policy != "best-effort" {
		t.Errorf("policies: base %q ring4 %q cdi %q", base.Allocation.Policy, ring4.Allocation.Policy, cdi.Allocation.Policy)
	}
	if len(ring4.Topology.Rings) != 1 || ring4.Topology.Source != "config" || base.Topology.Source != "auto" {
		t.Errorf("ring4 topology %+v, base %+v", ring4.Topology, base.Topology)
	}
	// Merged, not replaced: what the override leaves out is config's.
	if ring4.StateDir != base.StateDir || ring4.Injection.Mode != base.Injection.Mode || cdi.Injection.Mode != config.InjectionCDI {
		t.Errorf("merge: ring4 stateDir %q mode %q, cdi mode %q", ring4.StateDir, ring4.Injection.Mode, cdi.Injection.Mode)
	}

	checksums := map[string]bool{}
	for name, ds := range r.DaemonSets {
		cfgName, _ := strings.CutPrefix(name, "lpu-node-")
		file := "config-" + cfgName + ".yaml"
		if name == "lpu-node" {
			cfgName, file = "", "config.yaml"
		}
		sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
		if err != nil || !sel.Matches(labels.Set(ds.Spec.Template.Labels)) {
			t.Errorf("%s: selector %v does not match its pod labels %v", name, ds.Spec.Selector, ds.Spec.Template.Labels)
		}
		if got := ds.Spec.Selector.MatchLabels[nodeConfigLabel]; got != cfgName {
			t.Errorf("%s: selector %s=%q, want %q", name, nodeConfigLabel, got, cfgName)
		}
		if cfgName == "" && len(ds.Spec.Selector.MatchLabels) != 2 {
			t.Errorf("default DaemonSet selector changed: %v (immutable; an upgrade would fail)", ds.Spec.Selector.MatchLabels)
		}
		for _, c := range ds.Spec.Template.Spec.Containers {
			if !slices.Contains(c.Args, "--config=/etc/lpu/"+file) {
				t.Errorf("%s/%s args %v, want --config=/etc/lpu/%s", name, c.Name, c.Args, file)
			}
			if c.Name == "lpu-nri" {
				hasCDI := slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == "/var/run/cdi" })
				if hasCDI != (cfgName == "cdi-nodes") {
					t.Errorf("%s: lpu-nri mounts the CDI dir = %v; the mounts must follow the merged config", name, hasCDI)
				}
			}
		}
		checksums[ds.Spec.Template.Annotations["checksum/config"]] = true
	}
	if len(checksums) != 3 {
		t.Errorf("config checksums %v: each DaemonSet must roll only when its own config changes", checksums)
	}

	nodes := map[string]struct {
		labels map[string]string
		want   string // the one DaemonSet that runs there; "" none
	}{
		"plain LPU node":      {map[string]string{"kubernetes.io/os": "linux", "hyperaccel.ai/lpu.present": "true", "example.com/pool": "a"}, "lpu-node"},
		"ring4 node":          {map[string]string{"kubernetes.io/os": "linux", "hyperaccel.ai/lpu.present": "true", "example.com/pool": "a", nodeConfigLabel: "ring4"}, "lpu-node-ring4"},
		"cdi node":            {map[string]string{"kubernetes.io/os": "linux", "hyperaccel.ai/lpu.present": "true", "example.com/pool": "a", nodeConfigLabel: "cdi-nodes"}, "lpu-node-cdi-nodes"},
		"unknown config name": {map[string]string{"kubernetes.io/os": "linux", "hyperaccel.ai/lpu.present": "true", "example.com/pool": "a", nodeConfigLabel: "typo"}, "lpu-node"},
		"not an LPU node":     {map[string]string{"kubernetes.io/os": "linux", nodeConfigLabel: "ring4"}, ""},
	}
	for name, n := range nodes {
		var runs []string
		for dsName, ds := range r.DaemonSets {
			if schedulable(t, ds, n.labels) {
				runs = append(runs, dsName)
			}
		}
		want := []string{}
		if n.want != "" {
			want = []string{n.want}
		}
		if len(runs) == 0 {
			runs = []string{}
		}
		if !slices.Equal(runs, want) {
			t.Errorf("%s: runs %v, want %v", name, runs, want)
		}
	}
}

// TestChartNodeFeatureRule: with NFD the rule sets exactly the label the
// DaemonSet selects on, from the PCI IDs and kernel modules in values.
func TestChartNodeFeatureRule(t *testing.T) {
	helm := charttest.Helm(t)
	if r := renderSplit(t, helm); r.Rule != nil {
		t.Error("NodeFeatureRule rendered by default (it needs NFD's CRD)")
	}
	r := renderSplit(t, helm, "nodeFeatureRule.enabled=true", "nodeFeatureRule.kernelModules={xocl}",
		`json:nodeFeatureRule.pci=[{"vendor":["1eff"],"class":["1200","0b40"]},{"vendor":["10ee"],"device":["505d"]}]`)
	if r.Rule == nil {
		t.Fatal("no NodeFeatureRule")
	}
	if r.Rule.Namespace != "" {
		t.Errorf("NodeFeatureRule has namespace %q; it is cluster-scoped", r.Rule.Namespace)
	}
	ds := r.DaemonSets["lpu-node"]
	type expr = map[string][2]string // attribute → op, values
	var got []expr
	for _, rule := range r.Rule.Spec.Rules {
		for k, v := range rule.Labels {
			if ds.Spec.Template.Spec.NodeSelector[k] != v {
				t.Errorf("rule %s labels %s=%s, the DaemonSet selects %v", rule.Name, k, v, ds.Spec.Template.Spec.NodeSelector)
			}
		}
		if len(rule.Labels) != 1 {
			t.Errorf("rule %s labels %v, want one", rule.Name, rule.Labels)
		}
		matchers := rule.MatchFeatures
		for _, a := range rule.MatchAny {
			matchers = append(matchers, a.MatchFeatures...)
		}
		for _, m := range matchers {
			e := expr{}
			for attr, x := range m.MatchExpressions {
				e[m.Feature+"."+attr] = [2]string{x.Op, strings.Join(x.Value, ",")}
			}
			got = append(got, e)
		}
	}
	want := []expr{
		{"pci.device.vendor": {"In", "1eff"}, "pci.device.class": {"In", "1200,0b40"}},
		{"pci.device.vendor": {"In", "10ee"}, "pci.device.device": {"In", "505d"}},
		{"kernel.loadedmodule.xocl": {"Exists", ""}},
	}
	if len(got) != len(want) {
		t.Fatalf("matchers %v, want %v", got, want)
	}
	for i := range want {
		for k, v := range want[i] {
			if got[i][k] != v || len(got[i]) != len(want[i]) {
				t.Errorf("matcher %d = %v, want %v", i, got[i], want[i])
			}
		}
	}

	bad := map[string]struct{ set, want string }{
		"vendor with 0x":     {`json:nodeFeatureRule.pci=[{"vendor":["0x1eff"]}]`, "vendor"},
		"no vendor":          {`json:nodeFeatureRule.pci=[{"device":["505d"]}]`, "vendor"},
		"nothing to match":   {`json:nodeFeatureRule.pci=[]`, "at least one"},
		"bad config name":    {`json:nodeConfigs.configs={"Ring_4":{}}`, "Ring_4"},
		"unknown config key": {`json:nodeConfigs.configs={"a":{"ringSize":4}}`, "ringSize"},
	}
	for name, tc := range bad {
		t.Run(name, func(t *testing.T) {
			_, err := charttest.RunHelm(t, helm, charttest.TemplateArgs("nodeFeatureRule.enabled=true", tc.set)...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("--set %s: err %v, want one naming %q", tc.set, err, tc.want)
			}
		})
	}
}

// TestChartDoctorSeesItsChecks: `lpu-nri doctor` run in the default chart's
// lpu-nri container has a subject for every check: the NRI socket dir, the
// state dir (seal key, readiness socket), sysfs and /dev under root, the
// runtime's pre-installed NRI plugins, and, in place of the kubelet dir it
// does not mount, the device plugin's /healthz on the pod's loopback at the
// port the device plugin serves.
func TestChartDoctorSeesItsChecks(t *testing.T) {
	src, err := os.ReadFile("../cmd/lpu-nri/internal/daemon/daemon.go")
	if err != nil {
		t.Fatal(err)
	}
	const env = "LPU_DEVICE_PLUGIN_HEALTH_URL"
	if !strings.Contains(string(src), `DevicePluginHealthEnv = "`+env+`"`) {
		t.Fatalf("lpu-nri reads the device plugin health URL from another variable than %s", env)
	}
	helm := charttest.Helm(t)
	for name, sets := range map[string][]string{
		"defaults":   nil,
		"other port": {"devicePlugin.metricsPort=9999"},
	} {
		t.Run(name, func(t *testing.T) {
			ds := renderSplit(t, helm, sets...).DaemonSets["lpu-node"]
			var dp, nri corev1.Container
			for _, c := range ds.Spec.Template.Spec.Containers {
				switch c.Name {
				case "lpu-device-plugin":
					dp = c
				case "lpu-nri":
					nri = c
				}
			}
			var url string
			for _, e := range nri.Env {
				if e.Name == env {
					url = e.Value
				}
			}
			want := "http://127.0.0.1:" + strconv.Itoa(int(dp.Ports[0].ContainerPort)) + dp.LivenessProbe.HTTPGet.Path
			if url != want || dp.LivenessProbe.HTTPGet.Path != "/healthz" {
				t.Errorf("lpu-nri %s = %q, want %q (the device plugin's liveness endpoint)", env, url, want)
			}
			mounted := map[string]bool{}
			for _, m := range nri.VolumeMounts {
				mounted[m.MountPath] = true
			}
			for _, p := range []string{"/var/run/nri", "/var/lib/lpu", "/host/sys", "/host/dev", "/opt/nri/plugins"} {
				if !mounted[p] {
					t.Errorf("lpu-nri does not mount %s, which doctor checks", p)
				}
			}
		})
	}
}

// TestChartNodeConfigsDRA: in mode dra each named node config gets its
// own lpu-dra DaemonSet too, reading its own ConfigMap key (per-node
// rings, network tables and mounts reach the daemon that publishes the
// arcs), on exactly the nodes labelled with its name; the default lpu-dra
// DaemonSet keeps its selector and stays off those nodes (issue 33).
func TestChartNodeConfigsDRA(t *testing.T) {
	helm := charttest.Helm(t)
	r := renderSplit(t, helm, "mode=dra",
		`json:nodeConfigs.configs={"ring4":{"topology":{"source":"config","rings":[["lpu0","lpu1","lpu2","lpu3"]]}}}`)
	dra := map[string]*appsv1.DaemonSet{}
	for name, ds := range r.DaemonSets {
		if ds.Spec.Template.Labels["hyperaccel.ai/daemon"] == "lpu-dra" {
			dra[name] = ds
		}
	}
	if len(dra) != 2 || dra["lpu-node-dra"] == nil || dra["lpu-node-dra-ring4"] == nil {
		t.Fatalf("lpu-dra DaemonSets %v, want lpu-node-dra and lpu-node-dra-ring4", slices.Sorted(maps.Keys(dra)))
	}
	for name, file := range map[string]string{"lpu-node-dra": "config.yaml", "lpu-node-dra-ring4": "config-ring4.yaml"} {
		ds := dra[name]
		if c := ds.Spec.Template.Spec.Containers[0]; !slices.Contains(c.Args, "--config=/etc/lpu/"+file) {
			t.Errorf("%s args %v, want --config=/etc/lpu/%s", name, c.Args, file)
		}
		sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
		if err != nil || !sel.Matches(labels.Set(ds.Spec.Template.Labels)) {
			t.Errorf("%s: selector %v does not match its pod labels", name, ds.Spec.Selector)
		}
	}
	if got := dra["lpu-node-dra"].Spec.Selector.MatchLabels; len(got) != 3 || got[nodeConfigLabel] != "" {
		t.Errorf("default lpu-dra selector changed: %v (immutable; an upgrade would fail)", got)
	}
	if dra["lpu-node-dra"].Spec.Template.Annotations["checksum/config"] == dra["lpu-node-dra-ring4"].Spec.Template.Annotations["checksum/config"] {
		t.Error("both lpu-dra DaemonSets roll on the same config checksum")
	}
	for node, want := range map[string]string{
		"plain LPU node": "lpu-node-dra",
		"ring4 node":     "lpu-node-dra-ring4",
	} {
		lbl := map[string]string{"kubernetes.io/os": "linux", "hyperaccel.ai/lpu.present": "true"}
		if node == "ring4 node" {
			lbl[nodeConfigLabel] = "ring4"
		}
		var runs []string
		for name, ds := range dra {
			if schedulable(t, ds, lbl) {
				runs = append(runs, name)
			}
		}
		if !slices.Equal(runs, []string{want}) {
			t.Errorf("%s runs lpu-dra %v, want [%s]", node, runs, want)
		}
	}
}

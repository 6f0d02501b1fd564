package tests_test

import (
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
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

const nodeModeLabel = "hyperaccel.ai/lpu.mode"

// renderDocs renders the chart and keys its documents by kind/name.
func renderDocs(t *testing.T, helm string, sets ...string) map[string]charttest.Doc {
	t.Helper()
	out := map[string]charttest.Doc{}
	for _, d := range charttest.Split(t, charttest.Render(t, helm, sets...)) {
		d.Text = strings.TrimSpace(d.Text)
		key := d.Kind + "/" + d.Name
		if _, dup := out[key]; dup {
			t.Fatalf("two documents %s", key)
		}
		out[key] = d
	}
	return out
}

// allocators are the containers that serve a node's LPUs to Kubernetes.
var allocators = []string{"lpu-device-plugin", "lpu-dra"}

func containerNames(ds *appsv1.DaemonSet) []string {
	var out []string
	for _, c := range ds.Spec.Template.Spec.Containers {
		out = append(out, c.Name)
	}
	return out
}

// TestChartNodeModes: with nodeModes.enabled a node labelled with the other
// mode runs the other mode's daemons and every other LPU node the
// release's: each LPU node gets exactly one allocator (device plugin xor
// lpu-dra) and one lpu-nri, with its own config; the release-mode
// DaemonSets keep their names and selectors (immutable on upgrade); the
// new DaemonSets select only their own pods; and the cluster-level objects
// of both modes render.
func TestChartNodeModes(t *testing.T) {
	helm := charttest.Helm(t)
	monitors := []string{"metrics.serviceMonitor.enabled=true", "metrics.prometheusRule.enabled=true"}
	ring4 := `json:nodeConfigs.configs={"ring4":{"allocation":{"policy":"strict"},"topology":{"source":"config","rings":[["lpu0","lpu1","lpu2","lpu3"]]}}}`
	for _, tc := range []struct {
		name, mode string
		configs    bool
		newNames   []string // the other mode's DaemonSets
	}{
		{"devicePlugin release", "devicePlugin", false, []string{"lpu-node-dranode", "lpu-node-dranode-dra"}},
		{"devicePlugin release with a named config", "devicePlugin", true,
			[]string{"lpu-node-dranode", "lpu-node-dranode-dra", "lpu-node-dranode-dra-ring4", "lpu-node-dranode-ring4"}},
		{"dra release", "dra", false, []string{"lpu-node-dpnode"}},
		{"dra release with a named config", "dra", true, []string{"lpu-node-dpnode", "lpu-node-dpnode-ring4"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := append([]string{"mode=" + tc.mode}, monitors...)
			if tc.configs {
				base = append(base, ring4)
			}
			other := map[string]string{"devicePlugin": "dra", "dra": "devicePlugin"}[tc.mode]
			on := renderSplit(t, helm, append(base, "nodeModes.enabled=true")...)
			off := renderSplit(t, helm, base...)

			// The release-mode DaemonSets: the same names, selectors and pod
			// labels as without nodeModes.
			var wantNames []string
			for name, was := range off.DaemonSets {
				wantNames = append(wantNames, name)
				ds := on.DaemonSets[name]
				if ds == nil {
					t.Errorf("release-mode DaemonSet %s is gone", name)
					continue
				}
				if !reflect.DeepEqual(ds.Spec.Selector, was.Spec.Selector) {
					t.Errorf("%s: selector %v, was %v (immutable: an upgrade would fail)", name, ds.Spec.Selector, was.Spec.Selector)
				}
				if !maps.Equal(ds.Spec.Template.Labels, was.Spec.Template.Labels) {
					t.Errorf("%s: pod labels %v, were %v", name, ds.Spec.Template.Labels, was.Spec.Template.Labels)
				}
				if !slices.Equal(containerNames(ds), containerNames(was)) {
					t.Errorf("%s: containers %v, were %v", name, containerNames(ds), containerNames(was))
				}
			}
			wantNames = append(wantNames, tc.newNames...)
			slices.Sort(wantNames)
			if got := slices.Sorted(maps.Keys(on.DaemonSets)); !slices.Equal(got, wantNames) {
				t.Fatalf("DaemonSets %v, want %v", got, wantNames)
			}

			// The new DaemonSets run the other mode's daemons, carry the mode
			// label in selector, pod labels and node selector.
			for _, name := range tc.newNames {
				ds := on.DaemonSets[name]
				want := []string{"lpu-device-plugin", "lpu-nri"}
				if other == "dra" {
					want = []string{"lpu-nri"}
					if strings.HasPrefix(name, "lpu-node-dranode-dra") {
						want = []string{"lpu-dra"}
					}
				}
				if got := containerNames(ds); !slices.Equal(got, want) {
					t.Errorf("%s: containers %v, want %v", name, got, want)
				}
				if ds.Spec.Selector.MatchLabels[nodeModeLabel] != other || ds.Spec.Template.Labels[nodeModeLabel] != other ||
					ds.Spec.Template.Spec.NodeSelector[nodeModeLabel] != other {
					t.Errorf("%s: mode label in selector %v, pod labels %v, node selector %v; want %s=%s in each",
						name, ds.Spec.Selector.MatchLabels, ds.Spec.Template.Labels, ds.Spec.Template.Spec.NodeSelector, nodeModeLabel, other)
				}
			}

			// Selectors: each DaemonSet's matches its own pods; a new one's
			// matches no other DaemonSet's pods. The release-mode selectors
			// are as they were (checked above): the default one
			// (app.kubernetes.io/name and instance) already matched the pods
			// of lpu-dra and of the named configs, and matches the new ones'
			// too; the DaemonSet controller keeps each pod with the
			// DaemonSet its controller reference names.
			for a, dsA := range on.DaemonSets {
				sel, err := metav1.LabelSelectorAsSelector(dsA.Spec.Selector)
				if err != nil {
					t.Fatalf("%s: selector: %v", a, err)
				}
				if !sel.Matches(labels.Set(dsA.Spec.Template.Labels)) {
					t.Errorf("%s: selector %v does not match its pod labels %v", a, sel, dsA.Spec.Template.Labels)
				}
				if off.DaemonSets[a] != nil {
					continue
				}
				for b, dsB := range on.DaemonSets {
					if a != b && sel.Matches(labels.Set(dsB.Spec.Template.Labels)) {
						t.Errorf("%s's selector %v matches %s's pods %v", a, sel, b, dsB.Spec.Template.Labels)
					}
				}
			}

			// The helm test pod is no DaemonSet's.
			pod, _ := checkPod(t, helm, append(base, "nodeModes.enabled=true")...)
			for name, ds := range on.DaemonSets {
				selects(t, name, ds.Spec.Selector, pod)
			}

			// Every LPU node runs exactly one allocator and one lpu-nri,
			// those of its mode and its config.
			for _, mode := range []string{"", "devicePlugin", "dra", "typo"} {
				for _, cfg := range []string{"", "ring4"} {
					node := map[string]string{"kubernetes.io/os": "linux", "hyperaccel.ai/lpu.present": "true"}
					if mode != "" {
						node[nodeModeLabel] = mode
					}
					if cfg != "" {
						node[nodeConfigLabel] = cfg
					}
					wantMode, wantFile := tc.mode, "config.yaml"
					if mode == other {
						wantMode = other
					}
					if cfg != "" && tc.configs {
						wantFile = "config-ring4.yaml"
					}
					var alloc, nri []string
					for name, ds := range on.DaemonSets {
						if !schedulable(t, ds, node) {
							continue
						}
						for _, c := range ds.Spec.Template.Spec.Containers {
							if !slices.Contains(c.Args, "--config=/etc/lpu/"+wantFile) {
								t.Errorf("node %v runs %s/%s with args %v, want --config=/etc/lpu/%s", node, name, c.Name, c.Args, wantFile)
							}
							switch {
							case slices.Contains(allocators, c.Name):
								alloc = append(alloc, c.Name)
							case c.Name == "lpu-nri":
								nri = append(nri, name)
							}
						}
					}
					wantAlloc := map[string]string{"devicePlugin": "lpu-device-plugin", "dra": "lpu-dra"}[wantMode]
					if !slices.Equal(alloc, []string{wantAlloc}) || len(nri) != 1 {
						t.Errorf("node %v runs allocators %v and lpu-nri of %v; want [%s] and one lpu-nri", node, alloc, nri, wantAlloc)
					}
				}
			}
			// A node without the LPU label runs nothing, whatever its mode.
			for _, mode := range []string{"devicePlugin", "dra"} {
				for name, ds := range on.DaemonSets {
					if schedulable(t, ds, map[string]string{"kubernetes.io/os": "linux", nodeModeLabel: mode}) {
						t.Errorf("%s runs on a node without hyperaccel.ai/lpu.present labelled %s", name, mode)
					}
				}
			}

			// A device plugin that may meet lpu-dra on its node sees lpu-dra's
			// registration socket (its one-mode-per-node check).
			for name, ds := range on.DaemonSets {
				for _, c := range ds.Spec.Template.Spec.Containers {
					if c.Name != "lpu-device-plugin" {
						continue
					}
					i := slices.IndexFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "plugins-registry" })
					if i < 0 || c.VolumeMounts[i].MountPath != "/var/lib/kubelet/plugins_registry" || !c.VolumeMounts[i].ReadOnly {
						t.Errorf("%s: lpu-device-plugin mounts %v; want plugins-registry read-only at /var/lib/kubelet/plugins_registry", name, c.VolumeMounts)
					}
					j := slices.IndexFunc(ds.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == "plugins-registry" })
					if j < 0 || ds.Spec.Template.Spec.Volumes[j].HostPath == nil || ds.Spec.Template.Spec.Volumes[j].HostPath.Path != "/var/lib/kubelet/plugins_registry" {
						t.Errorf("%s: no hostPath volume plugins-registry of dra.registryDir", name)
					}
				}
			}

			// Both kinds of config: the ConfigMap carries lpu-dra's part, and
			// the daemons' loader accepts every key.
			for key, body := range on.ConfigMap.Data {
				p := filepath.Join(t.TempDir(), key)
				if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
					t.Fatal(err)
				}
				cfg, err := config.Load(p)
				if err != nil {
					t.Fatalf("config.Load(%s): %v\n%s", key, err, body)
				}
				if !slices.Equal(cfg.DRA.ArcSizes, []int{1, 2, 4, 8}) {
					t.Errorf("%s: dra.arcSizes %v, want lpu-dra's [1 2 4 8]", key, cfg.DRA.ArcSizes)
				}
			}

			// The cluster-level objects of both modes.
			docs := renderDocs(t, helm, append(base, "nodeModes.enabled=true")...)
			alone := map[string]map[string]charttest.Doc{}
			for _, m := range []string{"devicePlugin", "dra"} {
				sets := append([]string{"mode=" + m}, monitors...)
				if tc.configs {
					sets = append(sets, ring4)
				}
				alone[m] = renderDocs(t, helm, sets...)
			}
			for m, objs := range alone {
				for key, d := range objs {
					if d.Kind == "DaemonSet" {
						continue
					}
					got, ok := docs[key]
					if !ok {
						t.Errorf("%s (mode %s) does not render with nodeModes.enabled", key, m)
						continue
					}
					// DRA's classes, claim templates, RBAC and policies, and
					// the runtime gate, are those of mode dra.
					src := strings.TrimPrefix(d.Source, "lpu-node/templates/")
					if m == "dra" && (strings.HasPrefix(src, "dra-") || src == "runtimegate.yaml" || src == "configmap.yaml") && got.Text != d.Text {
						t.Errorf("%s differs from mode dra's:\n%s\nwant\n%s", key, got.Text, d.Text)
					}
				}
			}
			objs := decode(t, []byte(docs["Service/lpu-node-metrics"].Text))
			var ports []string
			for _, p := range objs.Service.Spec.Ports {
				ports = append(ports, p.Name)
			}
			if want := []string{"metrics-dp", "metrics-dra", "metrics-nri"}; !slices.Equal(ports, want) {
				t.Errorf("Service ports %v, want %v", ports, want)
			}
			var sm ServiceMonitor
			if err := yaml.UnmarshalStrict([]byte(docs["ServiceMonitor/lpu-node"].Text), &sm); err != nil {
				t.Fatal(err)
			}
			var scraped []string
			for _, e := range sm.Spec.Endpoints {
				scraped = append(scraped, e.Port)
			}
			if !slices.Equal(scraped, ports) {
				t.Errorf("ServiceMonitor scrapes %v, want %v", scraped, ports)
			}
			np := decode(t, []byte(docs["NetworkPolicy/lpu-node-metrics"].Text)).NetworkPolicy
			var npPorts []int32
			for _, p := range np.Spec.Ingress[0].Ports {
				npPorts = append(npPorts, p.Port.IntVal)
			}
			if want := []int32{9410, 9411, 9412}; !slices.Equal(slices.Sorted(slices.Values(npPorts)), want) {
				t.Errorf("NetworkPolicy ports %v, want %v", npPorts, want)
			}
			alerts := func(d charttest.Doc) []string {
				var pr struct {
					Spec struct {
						Groups []struct {
							Rules []struct {
								Alert string `json:"alert"`
							} `json:"rules"`
						} `json:"groups"`
					} `json:"spec"`
				}
				if err := yaml.Unmarshal([]byte(d.Text), &pr); err != nil {
					t.Fatal(err)
				}
				var out []string
				for _, g := range pr.Spec.Groups {
					for _, r := range g.Rules {
						out = append(out, r.Alert)
					}
				}
				return out
			}
			both := slices.Compact(slices.Sorted(slices.Values(append(alerts(alone["devicePlugin"]["PrometheusRule/lpu-node"]), alerts(alone["dra"]["PrometheusRule/lpu-node"])...))))
			if got := slices.Sorted(slices.Values(alerts(docs["PrometheusRule/lpu-node"]))); !slices.Equal(got, both) {
				t.Errorf("PrometheusRule alerts %v, want both modes' %v", got, both)
			}
		})
	}
}

// TestChartNodeModesOff: nodeModes.enabled=false renders what the chart
// renders without the value (deploy/manifests are checked against the
// chart by TestManifestsMatchChart).
func TestChartNodeModesOff(t *testing.T) {
	helm := charttest.Helm(t)
	ring4 := `json:nodeConfigs.configs={"ring4":{"allocation":{"policy":"strict"}}}`
	for _, mode := range []string{"devicePlugin", "dra"} {
		a := charttest.Render(t, helm, "mode="+mode, ring4)
		b := charttest.Render(t, helm, "mode="+mode, ring4, "nodeModes.enabled=false", "nodeModes.label=example.com/other")
		if string(a) != string(b) {
			t.Errorf("mode %s: nodeModes.enabled=false changes the rendering at byte %d", mode, firstDiff(string(a), string(b)))
		}
	}
}

// TestChartNodeModesRejects: values nodeModes cannot work with are refused
// by name.
func TestChartNodeModesRejects(t *testing.T) {
	helm := charttest.Helm(t)
	for name, tc := range map[string]struct {
		sets []string
		want []string // substrings of helm's error
	}{
		"label shared with nodeConfigs": {[]string{"nodeModes.enabled=true", "nodeModes.label=hyperaccel.ai/lpu.config"},
			[]string{"nodeModes.label", "nodeConfigs.label", "hyperaccel.ai/lpu.config"}},
		"label of the node selector": {[]string{"nodeModes.enabled=true", "nodeModes.label=hyperaccel.ai/lpu.present"},
			[]string{"nodeModes.label", "hyperaccel.ai/lpu.present", "nodeSelector"}},
		"not a label key":  {[]string{"nodeModes.enabled=true", "nodeModes.label=lpu mode"}, []string{"nodeModes", "label"}},
		"empty label":      {[]string{"nodeModes.enabled=true", "nodeModes.label="}, []string{"nodeModes", "label"}},
		"enabled a string": {[]string{"nodeModes.enabled=dra"}, []string{"nodeModes", "enabled"}},
		"unknown key":      {[]string{"nodeModes.labels=x"}, []string{"labels"}},
		"config named like a node-mode DaemonSet": {[]string{"nodeModes.enabled=true", `json:nodeConfigs.configs={"dranode":{}}`},
			[]string{"lpu-node-dranode", "config dranode", "rename the config"}},
		"config named like a dpnode DaemonSet": {[]string{"mode=dra", "nodeModes.enabled=true", `json:nodeConfigs.configs={"dpnode":{}}`},
			[]string{"lpu-node-dpnode", "config dpnode"}},
		"DRA below 1.36": {[]string{"nodeModes.enabled=true", "runtimeGate.enabled=false", "--kube-version", "1.35.3"},
			[]string{"nodeModes.enabled", "set nodeModes.enabled=false", "1.36"}},
	} {
		t.Run(name, func(t *testing.T) {
			out, err := charttest.RunHelm(t, helm, charttest.TemplateArgs(tc.sets...)...)
			if err == nil {
				t.Fatalf("helm template %v succeeded:\n%.400s", tc.sets, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not name %q: %v", w, err)
				}
			}
		})
	}
	// The same cluster serves a devicePlugin release without nodeModes.
	charttest.Render(t, helm, "runtimeGate.enabled=false", "--kube-version", "1.35.3")
}

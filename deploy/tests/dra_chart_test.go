package tests_test

import (
	"os"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"sigs.k8s.io/yaml"

	"github.com/hyperaccel/lpu-node/deploy/charttest"
)

const draManifestsFile = "manifests/lpu-node-dra.yaml"

// draObjects is a mode=dra rendering, decoded strictly.
type draObjects struct {
	DaemonSets      map[string]*appsv1.DaemonSet
	DeviceClasses   map[string]*resourcev1.DeviceClass
	ClaimTemplates  map[string]*resourcev1.ResourceClaimTemplate
	ClusterRole     *rbacv1.ClusterRole
	Binding         *rbacv1.ClusterRoleBinding
	ServiceAccounts []string
	NetworkPolicy   *networkingv1.NetworkPolicy
}

func decodeDRA(t *testing.T, rendered []byte) draObjects {
	t.Helper()
	o := draObjects{DaemonSets: map[string]*appsv1.DaemonSet{}, DeviceClasses: map[string]*resourcev1.DeviceClass{},
		ClaimTemplates: map[string]*resourcev1.ResourceClaimTemplate{}}
	for i, tm := range charttest.Split(t, rendered) {
		strict := func(v any) {
			if err := yaml.UnmarshalStrict([]byte(tm.Text), v); err != nil {
				t.Fatalf("document %d (%s): strict decode: %v\n%s", i, tm.Kind, err, tm.Text)
			}
		}
		switch tm.APIVersion + "/" + tm.Kind {
		case "apps/v1/DaemonSet":
			var ds appsv1.DaemonSet
			strict(&ds)
			o.DaemonSets[ds.Name] = &ds
		case "resource.k8s.io/v1/DeviceClass":
			var dc resourcev1.DeviceClass
			strict(&dc)
			o.DeviceClasses[dc.Name] = &dc
		case "resource.k8s.io/v1/ResourceClaimTemplate":
			var rct resourcev1.ResourceClaimTemplate
			strict(&rct)
			o.ClaimTemplates[rct.Namespace+"/"+rct.Name] = &rct
		case "rbac.authorization.k8s.io/v1/ClusterRole":
			o.ClusterRole = &rbacv1.ClusterRole{}
			strict(o.ClusterRole)
		case "rbac.authorization.k8s.io/v1/ClusterRoleBinding":
			o.Binding = &rbacv1.ClusterRoleBinding{}
			strict(o.Binding)
		case "v1/ServiceAccount":
			var sa corev1.ServiceAccount
			strict(&sa)
			o.ServiceAccounts = append(o.ServiceAccounts, sa.Name)
		case "networking.k8s.io/v1/NetworkPolicy":
			o.NetworkPolicy = &networkingv1.NetworkPolicy{}
			strict(o.NetworkPolicy)
		case "v1/ConfigMap", "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy", "admissionregistration.k8s.io/v1/MutatingAdmissionPolicyBinding",
			"admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy", "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicyBinding":
			// the runtime gate: TestRuntimeGatePolicies
		default:
			t.Fatalf("document %d: unexpected kind %s/%s", i, tm.APIVersion, tm.Kind)
		}
	}
	return o
}

func TestChartDRAMode(t *testing.T) {
	helm := charttest.Helm(t)
	o := decodeDRA(t, charttest.Render(t, helm, "mode=dra", "json:dra.arcSizes=[1,4]", "json:dra.claimTemplates.namespaces=[\"ml\"]"))

	main, dra := o.DaemonSets[release], o.DaemonSets[release+"-dra"]
	if main == nil || dra == nil || len(o.DaemonSets) != 2 {
		t.Fatalf("daemonsets %v, want %s and %s-dra", keys(o.DaemonSets), release, release)
	}
	var names []string
	for _, c := range main.Spec.Template.Spec.Containers {
		names = append(names, c.Name)
	}
	if !slices.Equal(names, []string{"lpu-nri"}) {
		t.Fatalf("main DaemonSet containers %v: in dra mode the device plugin must not run", names)
	}
	spec := dra.Spec.Template.Spec
	if len(spec.Containers) != 1 || spec.Containers[0].Name != "lpu-dra" || spec.ServiceAccountName != release+"-dra" ||
		spec.AutomountServiceAccountToken == nil || !*spec.AutomountServiceAccountToken {
		t.Fatalf("dra pod spec: %+v", spec)
	}
	c := spec.Containers[0]
	if !slices.Equal(c.Command, []string{"/usr/bin/lpu-dra"}) {
		t.Fatalf("command %v", c.Command)
	}
	for _, a := range []string{"--config=/etc/lpu/config.yaml", "--metrics-addr=:9412",
		"--plugin-dir=/var/lib/kubelet/plugins/lpu.hyperaccel.ai", "--registry-dir=/var/lib/kubelet/plugins_registry",
		"--nfd-features-file=" + nfdDir + "/lpu"} {
		if !slices.Contains(c.Args, a) {
			t.Errorf("args %v lack %s", c.Args, a)
		}
	}
	if len(c.Env) == 0 || c.Env[0].Name != "NODE_NAME" || c.Env[0].ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
		t.Errorf("env %v: want NODE_NAME from spec.nodeName", c.Env)
	}
	checkDRASurge(t, dra, c)
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m
	}
	for path, ro := range map[string]bool{"/var/lib/kubelet/plugins/lpu.hyperaccel.ai": false, "/var/lib/kubelet/plugins_registry": false,
		"/var/run/cdi": false, "/var/lib/lpu": false, "/var/lib/kubelet/device-plugins": true, "/host/sys": true, "/host/dev": true,
		nfdDir: false} {
		if m, ok := mounts[path]; !ok || m.ReadOnly != ro {
			t.Errorf("mount %s: %+v (want present, readOnly %v)", path, m, ro)
		}
	}

	// Without NFD: the file disabled, no mount, as for the device plugin.
	off := decodeDRA(t, charttest.Render(t, helm, "mode=dra", "nfd.enabled=false")).DaemonSets[release+"-dra"].Spec.Template.Spec
	if !slices.Contains(off.Containers[0].Args, "--nfd-features-file=") {
		t.Errorf("nfd.enabled=false: args %v lack --nfd-features-file=", off.Containers[0].Args)
	}
	for _, m := range off.Containers[0].VolumeMounts {
		if m.MountPath == nfdDir {
			t.Errorf("nfd.enabled=false: lpu-dra still mounts %s", nfdDir)
		}
	}

	if len(o.DeviceClasses) != 4 {
		t.Fatalf("device classes %v", keys(o.DeviceClasses))
	}
	all := o.DeviceClasses["lpu.hyperaccel.ai"]
	if all == nil || all.Spec.Selectors[0].CEL.Expression != `device.driver == "lpu.hyperaccel.ai"` || all.Spec.ExtendedResourceName != nil {
		t.Fatalf("class lpu.hyperaccel.ai: %+v", all)
	}
	four := o.DeviceClasses["lpu-arc-4.hyperaccel.ai"]
	if four == nil || four.Spec.ExtendedResourceName == nil || *four.Spec.ExtendedResourceName != "hyperaccel.ai/lpu-arc-4" ||
		!strings.Contains(four.Spec.Selectors[0].CEL.Expression, `device.attributes["lpu.hyperaccel.ai"].size == 4`) {
		t.Fatalf("class lpu-arc-4: %+v", four)
	}
	// The device plugin's resource, served by the count devices.
	count := o.DeviceClasses["lpu-count.hyperaccel.ai"]
	if count == nil || count.Spec.ExtendedResourceName == nil || *count.Spec.ExtendedResourceName != "hyperaccel.ai/lpu" ||
		!strings.Contains(count.Spec.Selectors[0].CEL.Expression, `.?countPath.orValue(false)`) {
		t.Fatalf("class lpu-count: %+v", count)
	}

	// A strict template per size, a best-effort one per size above 1, each
	// naming its size class (no request selectors: one CEL per device).
	if got := keys(o.ClaimTemplates); !slices.Equal(got, []string{"ml/lpu-4-best-effort", "ml/lpu-arc-1", "ml/lpu-arc-4"}) {
		t.Fatalf("claim templates %v", got)
	}
	for _, k := range []string{"1", "4"} {
		r := o.ClaimTemplates["ml/lpu-arc-"+k].Spec.Spec.Devices.Requests[0]
		if r.Exactly == nil || r.Exactly.DeviceClassName != "lpu-arc-"+k+".hyperaccel.ai" || len(r.Exactly.Selectors) != 0 || r.Exactly.Count > 1 {
			t.Fatalf("strict template lpu-arc-%s request %+v", k, r)
		}
	}
	fa := o.ClaimTemplates["ml/lpu-4-best-effort"].Spec.Spec.Devices.Requests[0].FirstAvailable
	if len(fa) != 2 || fa[0].Name != "arc" || fa[0].DeviceClassName != "lpu-arc-4.hyperaccel.ai" || fa[0].Count > 1 ||
		fa[1].Name != "singles" || fa[1].DeviceClassName != "lpu-arc-1.hyperaccel.ai" || fa[1].Count != 4 || len(fa[0].Selectors)+len(fa[1].Selectors) != 0 {
		t.Fatalf("best-effort firstAvailable %+v", fa)
	}

	// lpu-dra publishes the offered sizes only, unless told every arc.
	for sets, want := range map[string][]int{"": {1, 4}, "dra.publishEveryArc=true": {}} {
		args := []string{"mode=dra", "json:dra.arcSizes=[1,4]", "--show-only", "templates/configmap.yaml"}
		if sets != "" {
			args = append(args, sets)
		}
		cfg := loadConfigMap(t, decode(t, charttest.Render(t, helm, args...)).ConfigMap)
		if !slices.Equal(cfg.DRA.ArcSizes, want) {
			t.Errorf("%q: config dra.arcSizes %v, want %v", sets, cfg.DRA.ArcSizes, want)
		}
	}
	// lpu-dra prepares claims of the chart's DeviceClasses (and the extra
	// ones the runtime gate is told of) only, with every arc published too.
	for _, sets := range []string{"", "dra.publishEveryArc=true"} {
		args := []string{"mode=dra", "json:dra.arcSizes=[1,4]", `json:runtimeGate.lpuDeviceClasses=["lpu-big.example.com"]`, "--show-only", "templates/configmap.yaml"}
		if sets != "" {
			args = append(args, sets)
		}
		cfg := loadConfigMap(t, decode(t, charttest.Render(t, helm, args...)).ConfigMap)
		classes := decodeDRA(t, charttest.Render(t, helm, "mode=dra", "json:dra.arcSizes=[1,4]")).DeviceClasses
		want := []string{"lpu-big.example.com"}
		for name := range classes {
			want = append(want, name)
		}
		if got := cfg.DRA.Classes(); !slices.Equal(slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(want))) {
			t.Errorf("%q: config dra.deviceClasses %v, want the chart's DeviceClasses and the gate's extra ones %v", sets, got, want)
		}
	}
	// The best-effort templates fall back to size-1 arcs: 1 must be offered.
	if _, err := charttest.RunHelm(t, helm, charttest.TemplateArgs("mode=dra", "json:dra.arcSizes=[2,4]")...); err == nil || !strings.Contains(err.Error(), "arcSizes") {
		t.Errorf("dra.arcSizes without 1 rendered: %v", err)
	}

	want := []rbacv1.PolicyRule{
		{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceslices"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
		{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims"}, Verbs: []string{"get"}},
		// its own Node's cordoned-LPU annotation, and the prefilter's labels
		// (docs/dra.md "Node-label prefilter"): its own Node's, held there by
		// the dra-node-labels policy (TestDRANodeLabelPolicy)
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch", "patch"}},
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list", "watch"}},
		// claim status (docs/dra.md "Claim status"): this driver's entries only
		{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims/status"}, Verbs: []string{"patch"}},
		{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims/driver"}, ResourceNames: []string{"lpu.hyperaccel.ai"}, Verbs: []string{"associated-node:patch"}},
	}
	if o.ClusterRole == nil || len(o.ClusterRole.Rules) != len(want) {
		t.Fatalf("cluster role %+v", o.ClusterRole)
	}
	for i, r := range want {
		got := o.ClusterRole.Rules[i]
		if !slices.Equal(got.APIGroups, r.APIGroups) || !slices.Equal(got.Resources, r.Resources) || !slices.Equal(got.Verbs, r.Verbs) ||
			!slices.Equal(got.ResourceNames, r.ResourceNames) {
			t.Errorf("rule %d = %+v, want %+v", i, got, r)
		}
	}
	if o.Binding == nil || o.Binding.Subjects[0].Name != release+"-dra" || o.Binding.RoleRef.Name != o.ClusterRole.Name {
		t.Fatalf("binding %+v", o.Binding)
	}

	// The metrics NetworkPolicy selects lpu-dra's pods too and admits its port.
	np := o.NetworkPolicy
	if np == nil || len(np.Spec.Ingress) != 1 {
		t.Fatalf("network policy %+v", np)
	}
	for k, v := range np.Spec.PodSelector.MatchLabels {
		if dra.Spec.Template.Labels[k] != v {
			t.Errorf("network policy selects %s=%s, lpu-dra's pods have %q", k, v, dra.Spec.Template.Labels[k])
		}
	}
	var ports []int32
	for _, p := range np.Spec.Ingress[0].Ports {
		ports = append(ports, p.Port.IntVal)
	}
	if !slices.Contains(ports, 9412) {
		t.Errorf("network policy ports %v lack lpu-dra's 9412", ports)
	}
}

// The default mode renders none of the DRA objects.
func TestChartDevicePluginModeHasNoDRA(t *testing.T) {
	helm := charttest.Helm(t)
	out := string(charttest.Render(t, helm))
	for _, s := range []string{"lpu-dra", "DeviceClass", "ResourceClaimTemplate", "resourceslices"} {
		if strings.Contains(out, s) {
			t.Errorf("default rendering mentions %s", s)
		}
	}
	if _, err := charttest.RunHelm(t, helm, charttest.TemplateArgs("mode=both")...); err == nil || !strings.Contains(err.Error(), "mode") {
		t.Errorf("mode=both: %v", err)
	}
}

func TestDRAManifestsMatchChart(t *testing.T) {
	helm := charttest.Helm(t)
	got, err := os.ReadFile(draManifestsFile)
	if err != nil {
		t.Fatal(err)
	}
	want := `# Generated by deploy/render.sh from deploy/helm/lpu-node (default values and
# mode=dra, namespace kube-system, Kubernetes 1.37.2). Do not edit: change the chart and re-run render.sh.
` + string(charttest.Render(t, helm, "mode=dra"))
	if string(got) != want {
		t.Errorf("%s is stale: run deploy/render.sh (first difference at byte %d)", draManifestsFile, firstDiff(string(got), want))
	}
	decodeDRA(t, got)
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// checkDRASurge: lpu-dra upgrades by surge (docs/dra.md, "Upgrades"): the
// new pod beside the old one (maxSurge 1, maxUnavailable 0, so a node
// never lacks a driver), told its pod UID for the kubelet's rolling-update
// sockets. The main DaemonSet keeps its own strategy.
func checkDRASurge(t *testing.T, dra *appsv1.DaemonSet, c corev1.Container) {
	t.Helper()
	st := dra.Spec.UpdateStrategy
	if st.Type != appsv1.RollingUpdateDaemonSetStrategyType || st.RollingUpdate == nil ||
		st.RollingUpdate.MaxSurge == nil || st.RollingUpdate.MaxSurge.IntValue() != 1 ||
		st.RollingUpdate.MaxUnavailable == nil || st.RollingUpdate.MaxUnavailable.IntValue() != 0 {
		t.Errorf("lpu-dra updateStrategy %+v, want RollingUpdate maxSurge 1 maxUnavailable 0", st.RollingUpdate)
	}
	var uid *corev1.EnvVar
	for i := range c.Env {
		if c.Env[i].Name == "POD_UID" {
			uid = &c.Env[i]
		}
	}
	if uid == nil || uid.ValueFrom == nil || uid.ValueFrom.FieldRef == nil || uid.ValueFrom.FieldRef.FieldPath != "metadata.uid" {
		t.Errorf("env %v: want POD_UID from metadata.uid", c.Env)
	}
	// No host port or host network: two pods of the surge share the node.
	if dra.Spec.Template.Spec.HostNetwork {
		t.Error("lpu-dra uses the host network: the surge pod could not bind its port")
	}
	for _, p := range c.Ports {
		if p.HostPort != 0 {
			t.Errorf("port %s has host port %d: the surge pod could not start beside the old one", p.Name, p.HostPort)
		}
	}
}

// The strategy is a value: OnDelete renders as given, and the schema
// refuses what a DaemonSet does not take.
func TestChartDRAUpdateStrategyValue(t *testing.T) {
	helm := charttest.Helm(t)
	o := decodeDRA(t, charttest.Render(t, helm, "mode=dra", "dra.updateStrategy.type=OnDelete", "dra.updateStrategy.rollingUpdate=null"))
	if st := o.DaemonSets[release+"-dra"].Spec.UpdateStrategy; st.Type != appsv1.OnDeleteDaemonSetStrategyType || st.RollingUpdate != nil {
		t.Errorf("dra.updateStrategy OnDelete rendered %+v", st)
	}
	if main := o.DaemonSets[release].Spec.UpdateStrategy; main.RollingUpdate == nil || main.RollingUpdate.MaxUnavailable.IntValue() != 1 {
		t.Errorf("the main DaemonSet's strategy changed with dra.updateStrategy: %+v", main)
	}
	if _, err := charttest.RunHelm(t, helm, charttest.TemplateArgs("mode=dra", "dra.updateStrategy.rollingUpdate.partition=1")...); err == nil {
		t.Error("dra.updateStrategy.rollingUpdate.partition rendered: the schema must refuse unknown fields")
	}
}

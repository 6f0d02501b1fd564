package tests_test

import (
	"slices"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/hyperaccel/lpu-node/deploy/charttest"
)

// manifestsFile is deploy/render.sh's rendering with default values.
const manifestsFile = "manifests/lpu-node.yaml"

// ServiceMonitor is the part of prometheus-operator's monitoring.coreos.com/v1
// ServiceMonitor the chart renders; strict decoding fails on anything else.
type ServiceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		JobLabel          string                        `json:"jobLabel"`
		NamespaceSelector struct{ MatchNames []string } `json:"namespaceSelector"`
		Selector          metav1.LabelSelector          `json:"selector"`
		Endpoints         []struct {
			Port          string `json:"port"`
			Path          string `json:"path"`
			Interval      string `json:"interval"`
			ScrapeTimeout string `json:"scrapeTimeout"`
			HonorLabels   bool   `json:"honorLabels"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// objects is one rendering, decoded strictly.
type objects struct {
	DaemonSet      *appsv1.DaemonSet
	ConfigMap      *corev1.ConfigMap
	ServiceAccount *corev1.ServiceAccount
	Service        *corev1.Service
	ServiceMonitor *ServiceMonitor
	NetworkPolicy  *networkingv1.NetworkPolicy
	// The device plugin's read of its own Node.
	ClusterRole        *rbacv1.ClusterRole
	ClusterRoleBinding *rbacv1.ClusterRoleBinding
	// The runtime gate (cluster-scoped) and its parameters, a second
	// ConfigMap (listed in Kinds as PolicyParams).
	PolicyParams      *corev1.ConfigMap
	MutatingPolicy    *admissionv1.MutatingAdmissionPolicy
	MutatingBinding   *admissionv1.MutatingAdmissionPolicyBinding
	ValidatingPolicy  *admissionv1.ValidatingAdmissionPolicy
	ValidatingBinding *admissionv1.ValidatingAdmissionPolicyBinding
	Kinds             []string // in rendering order
}

// decode splits a multi-document rendering and decodes each object strictly
// (unknown fields fail) into its k8s.io/api type. Unknown kinds and repeated
// kinds fail the test.
func decode(t *testing.T, rendered []byte) objects {
	t.Helper()
	var objs objects
	for i, d := range charttest.Split(t, rendered) {
		gvk := d.APIVersion + "/" + d.Kind
		kind := d.Kind
		var target any
		switch gvk {
		case "v1/ConfigMap":
			target = &objs.ConfigMap
			if d.IsPolicyParams() {
				target, kind = &objs.PolicyParams, "PolicyParams"
			}
		case "apps/v1/DaemonSet":
			target = &objs.DaemonSet
		case "v1/ServiceAccount":
			target = &objs.ServiceAccount
		case "v1/Service":
			target = &objs.Service
		case "monitoring.coreos.com/v1/ServiceMonitor":
			target = &objs.ServiceMonitor
		case "networking.k8s.io/v1/NetworkPolicy":
			target = &objs.NetworkPolicy
		case "rbac.authorization.k8s.io/v1/ClusterRole":
			target = &objs.ClusterRole
		case "rbac.authorization.k8s.io/v1/ClusterRoleBinding":
			target = &objs.ClusterRoleBinding
		case "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy":
			target = &objs.MutatingPolicy
		case "admissionregistration.k8s.io/v1/MutatingAdmissionPolicyBinding":
			target = &objs.MutatingBinding
		case "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy":
			target = &objs.ValidatingPolicy
		case "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicyBinding":
			target = &objs.ValidatingBinding
		default:
			t.Fatalf("document %d: unexpected kind %q\n%s", i, gvk, d.Text)
		}
		if slices.Contains(objs.Kinds, kind) {
			t.Fatalf("document %d: second %s", i, kind)
		}
		objs.Kinds = append(objs.Kinds, kind)
		if err := yaml.UnmarshalStrict([]byte(d.Text), target); err != nil {
			t.Fatalf("document %d (%s): strict decode: %v\n%s", i, gvk, err, d.Text)
		}
	}
	return objs
}

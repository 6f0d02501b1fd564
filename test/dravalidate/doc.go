// Package dravalidate checks lpu-dra's objects with the Kubernetes v1.37.2
// API server's own validation code (k8s.io/kubernetes/pkg/apis/resource/validation):
// the ResourceSlices pkg/arcslice builds and the chart's DeviceClasses and
// ResourceClaimTemplates. It is a module of its own so that the main module
// does not depend on k8s.io/kubernetes; test/check.sh runs it.
package dravalidate

// Package deploy holds no code: it is the home of the deployment artefacts
// and of the tests that keep them honest.
//
// # Layout
//
//   - container/Dockerfile: the multi-stage image build with both daemons.
//   - container/build-oci.sh: the same image without a container engine
//     (static binaries + umoci), reproducible from SOURCE_DATE_EPOCH.
//   - helm/lpu-node: the Helm chart (DaemonSet with lpu-device-plugin and
//     lpu-nri, ConfigMap with the v1 node config, optional metrics Service and
//     ServiceMonitor).
//   - manifests/lpu-node.yaml: the chart rendered with default values
//     (regenerate with render.sh).
//   - runtime/: containerd 1.7, containerd 2.x and CRI-O snippets enabling
//     NRI and CDI.
//   - version.sh: the release version (the VERSION file, one source for the
//     chart, the image tag and --version); release.sh: `make release`, every
//     artefact into dist/; chartoci: the packaged chart as an OCI artifact.
//   - helm/lpu-node/files: the Prometheus alert rules and Grafana dashboard.
//
// # Tests
//
// The tests live in deploy/tests, grouped by concern (chart_*, dra_*,
// policy_*, runtime_*, release_*), and render the chart through one helper,
// deploy/charttest: a real helm binary ($HELM, the test/e2e/tools.sh helm
// cache, or PATH), every object decoded strictly into k8s.io/api types, the
// admission policies installed in a real kube-apiserver. They also load the
// rendered config with config.Load, parse the runtime snippets, and — when
// the tools are present — let containerd merge its snippet and build the
// image with umoci:
//
//	HELM=/var/cache/lpu-e2e/helm-v3.22.0/helm go test ./deploy/tests/
package deploy

// Package tests holds the deploy tests, by concern, one file group each:
//
//   - chart_*: the chart rendered with helm, every object decoded strictly
//     (DaemonSets, configs, node configs and modes, the helm test pod, the
//     examples, the Kubernetes versions the chart accepts);
//   - dra_*: mode dra's objects, the scheduler profile, gang scheduling on a
//     real scheduler;
//   - policy_*: the admission policies, rendered and installed in a real
//     kube-apiserver (the runtime gate, lpu-dra's slice and node-label
//     policies, the prefilter, opaque config);
//   - runtime_*: the containerd and CRI-O snippets, parsed and merged by the
//     real runtimes when present;
//   - release_*: version.sh, the image build and release.sh.
//
// They render the chart through charttest and run in the deploy directory
// (TestMain), where the chart, manifests, snippets and scripts are:
//
//	HELM=/var/cache/lpu-e2e/helm-v3.22.0/helm go test ./deploy/tests/
package tests

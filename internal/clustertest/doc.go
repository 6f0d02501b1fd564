// Package clustertest runs a real Kubernetes control plane for tests: etcd
// and kube-apiserver, optionally kube-scheduler and kube-controller-manager,
// as child processes on loopback, built and cached by version by
// test/e2e/tools.sh (`bash test/e2e/tools.sh kube etcd`).
//
// Nothing is faked: objects are validated, defaulted, admitted and stored by
// the real v1.37 code, RBAC is on, and the scheduler and controller-manager
// act on what a test creates. There are no kubelets; tests that need a node
// create Node objects themselves.
//
// # Use
//
//	func TestSlices(t *testing.T) {
//		c := clustertest.Start(t, clustertest.Options{})
//		cs := kubernetes.NewForConfigOrDie(c.Config)
//		// ... cs.ResourceV1().ResourceSlices().Create(...)
//	}
//
// Start skips the test with a message naming the missing binary and the
// command that builds it, or fails it when CI=true, and stops the cluster
// when the test ends. New does the same without a testing.TB, for a
// TestMain that shares one cluster across a package or for a harness
// outside `go test`; call Stop when done.
//
// # What runs
//
// Each cluster has its own directory (state, certificates, kubeconfigs,
// one log per component under logs/) and free loopback ports. The admin
// identity is in group system:masters; UserConfig mints client certificates
// for any other user and groups, to test RBAC and admission policies as a
// tenant or a node agent would be seen. The scheduler and controller-manager
// run as system:kube-scheduler and system:kube-controller-manager, without
// leader election. Every child gets SIGKILL if the test process dies, and
// Stop ends each one by its PID (SIGTERM, then SIGKILL after a few seconds).
// RestartScheduler replaces kube-scheduler with another binary (a prototype)
// on the same port and flags, waiting for its /readyz (informers synced);
// the old log stays as kube-scheduler.N.log.
// Waits are bounded by Options.Timeout.
package clustertest

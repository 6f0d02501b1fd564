// Package dravalidate measures the scheduler's own allocator (Kubernetes
// v1.37.2, k8s.io/dynamic-resource-allocation) on what lpu-dra publishes:
// the Filter cost per node (BenchmarkSchedulerAllocate), the ExactCount
// fallback searches that cannot succeed (BenchmarkExactCountFallback,
// TestExactCountChoices, the golden file the precount prototype must
// match) and the scheduler_perf case proposed upstream (TestSchedPerfCase,
// lab/schedproto/schedperf). The checks that lpu-dra's objects pass the
// API server's validation stay with the product, in test/dravalidate.
package dravalidate

// Package churn draws the seeded stream of LPU jobs (sizes from a mix,
// Poisson arrivals, exponential lifetimes) that the allocation simulator
// (lab/sim) and the cluster harness (lab/cluster) replay, so that both
// measure the same workload.
//
//	jobs := churn.Generate(1, churn.MixDefault, 1000, 0.9, 800)
package churn

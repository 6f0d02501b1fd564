// Command sim is the allocation-quality simulator: it replays one seeded
// churn workload per node shape and size mix against several allocation
// policies (kubelet's arbitrary choice, first-fit, pkg/alloc, and the count
// bound) and reports how often each one admits a job on ring neighbours.
//
//	go run ./sim                       # default: 1e5 arrivals, 3 nodes × 3 mixes
//	go run ./sim -node 1x8 -mix default -arrivals 20000 -seed 7
//	go run ./sim -mix '1:50,3:30,5:20' -strict
//
// Every policy sees the same pre-generated jobs (size, arrival time and
// lifetime drawn once from the seed). Output: a table on stdout, and
// results.csv, sizes.csv and rates.svg in the output directory
// (lab/sim/out by default). The same flags give the same bytes.
// lab/notebooks/sim.md explains the metrics and holds the results.
package main

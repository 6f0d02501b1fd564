// Command cluster is the cluster-scale harness: it measures the real
// kube-scheduler (v1.37.2, with etcd, kube-apiserver and
// kube-controller-manager, as test/e2e/tools.sh builds them) placing LPU
// jobs on N Node objects that have no kubelet, once per way of serving
// LPUs, on one seeded workload.
//
//	go run ./cluster -nodes 100 -pods 1000 -unit 15s
//	make -C lab cluster-bench NODES=100 PODS=1000
//
// The harness plays each node's kubelet and node agent: it keeps the
// Node objects Ready (the apiserver's TaintNodesByCondition admission and
// the node-lifecycle controller are off, since nothing renews leases),
// admits and starts a bound pod (DRA: after reading its claim, off the
// node loop as each node's kubelet does, at most 32 reads at a time),
// and deletes it when its lifetime ends.
//
// # Arms
//
//   - dra-static, dra-dynamic, dra-best-effort: every node's ResourceSlices
//     come from pkg/arcslice, published through the resourceslice
//     controller with the node as owner, as lpu-dra's kubelet plugin
//     helper does (one controller per node, all in this process), with
//     the arc sizes of the manifest's lpu-dra config (dra.arcSizes; every
//     arc with -every-arc). Pods use the ResourceClaimTemplates of
//     deploy/manifests/lpu-node-dra.yaml as shipped (lpu-arc-k;
//     lpu-k-best-effort, a k-arc else k singles, in the best-effort arm).
//     The dynamic arms republish the
//     node's free arcs and its pods' arcs in order
//     (arcslice.Builder.FreeSlices with the held LPUs and the allocated
//     arcs, the code lpu-dra runs after Prepare and Unprepare); the static
//     arm keeps the empty node's full order.
//   - dp-least, dp-most (+ -strict): the nodes advertise hyperaccel.ai/lpu
//     and the scheduler places by count, with the default profile
//     (LeastAllocated) or a MostAllocated profile. The node side is
//     pkg/alloc as lpu-device-plugin runs it (Preferred, then Check);
//     strict refuses a scattered set, failing the pod's admission as a
//     kubelet does. The best-effort arms are scored twice from one run:
//     pkg/alloc and the kubelet's choice without a preferred allocation
//     (a seeded shuffle), since count placement does not depend on it.
//   - gang-on, gang-off (DRA dynamic), gang-dp-on, gang-dp-off (device
//     plugin), not in "all": the churn with -gang-share of its arrivals
//     turned into gangs of -gang-mix (default 2x8,4x4,2x4: pods × arc;
//     2x4m3 is a gang of 2 whose PodGroup asks for minCount 3, bad input
//     that can never be whole and counts as a deadlock, short_gangs),
//     as PodGroups with the Workload API on (the control plane then runs
//     with GenericWorkload) or as the same pods without a group (-load
//     counts the gangs' LPUs: arrivals are drawn at that much less). A gang's
//     pods depart together one lifetime after the last started. Per arm:
//     gangs whole, partial holds (LPU-seconds started pods held while a
//     sibling was not bound, from the pods' bind times; gaps up to 1 s
//     are one bind round), deadlocks (gangs not whole at the end), the
//     wait from a gang's arrival to its last pod (p50/p99) and the share
//     of multi-LPU pods on a contiguous arc; results-gang-N.csv and
//     cluster-gang-N.svg (gangs whole per arm). Run
//     them with -arms gang-on,gang-off,gang-dp-on,gang-dp-off. -replot CSV
//     draws a run's chart again from its results-N.csv or
//     results-gang-N.csv and starts nothing.
//
// # Variants: the prefilter and the prototype scheduler
//
// An arm's name may end in -prefilter, then in -proto, so that the same
// arm with and without them runs in one invocation (example below).
//
//   - ARM-prefilter (dra-dynamic, dra-best-effort, gang-on, gang-off: the
//     arms that republish): the manifest's MutatingAdmissionPolicy
//     <fullname>-dra-prefilter and its binding are created before the arm
//     (it waits until a dry-run pod of lpu-arc-4 and of lpu-4-best-effort
//     comes back with the policy's node affinity) and deleted after it;
//     every node runs its own pkg/nodelabel.Keeper, as each lpu-dra does,
//     and Sets the node's labels (arcslice.Builder.Free, raised by
//     Free.Holding to what each pod's claim holds) right before each
//     publication of its slices, as lpu-dra's Publish. At the churn's end,
//     with the node loop paused, every node's labels must come to be the
//     view last published within LowerAfter (5 s) and a minute, else it
//     is a harness error. After the arm the labels are removed.
//   - ARM-proto: the arm runs kube-scheduler -proto-scheduler PATH (e.g.
//     lab/schedproto's pool-cache prototype); between arms of different
//     schedulers kube-scheduler is restarted on the same port and flags
//     (clustertest.Cluster.RestartScheduler; its RSS then starts afresh).
//     -kube-scheduler PATH still replaces the scheduler of every other arm.
//
// -coalesce DURATION (default 0) delays a node's republish by that window
// after the first change not yet published, and publishes every change
// within it at once (and in a prefilter arm Sets the labels then), as
// lpu-dra would with such a window; it applies to every arm of the run.
// For example:
//
//	go run ./cluster -nodes 100 -pods 1000 -unit 15s -coalesce 150ms \
//	    -arms dra-dynamic,dra-dynamic-prefilter,dra-dynamic-proto,dra-dynamic-prefilter-proto \
//	    -proto-scheduler /var/cache/lpu-e2e/kube-scheduler-poolcache-v1.37.2/kube-scheduler
//
// # Workload and measures
//
// Each arm first creates a burst of pods at once and measures scheduler
// throughput from the scheduler's own scheduler_schedule_attempts_total,
// then replays the churn (lab/churn: the simulator's default mix,
// exponential lifetimes, offered load 0.9) in real time, one mean lifetime
// being -unit. A pod that does not fit waits; the churn ends one unit after
// the last arrival. It reports per arm the multi-LPU pods started on a
// contiguous arc, scattered, refused and still waiting; waits p50/p99 and
// the p50 of their legs (claim: created until the pod's status names its
// claim, 0 for count pods; bind: until seen bound; admit: until started;
// wait_claim_p50_s, wait_bind_p50_s, wait_admit_p50_s); the
// count bound (perfect compaction per node); scheduling-attempt latency
// from the scheduler's histogram; apiserver and scheduler CPU seconds per
// 1,000 pods and RSS; ResourceSlice count, bytes and writes; in prefilter
// arms the node-label writes and how long the labels took to show the
// published view at the end; in every arm the pods created and those
// given the prefilter's affinity, the harness's own CPU per 1,000 pods
// and RSS (what the keepers cost it), and the -coalesce window. Output:
// a table on stdout, results-N.csv and cluster-N.svg in -out; with
// -profile DIR also a CPU profile of the scheduler over each burst.
//
// # Priority workload
//
// -workload priority (arms dp-least, dp-least-strict, dra-dynamic unless
// -arms is given; not the gang arms) measures priority and preemption as
// the stock scheduler does them. The harness creates the PriorityClasses
// lpu-bench-low and lpu-bench-high, fills the nodes with low-priority 1-
// and 2-LPU pods (a wave, a third of it ended, a second wave, then 1-LPU
// pods for what is left, so that a pod's age does not follow its ring
// position), then submits -high (default: one per node) high-priority
// pods of 4 and 8 LPUs in turn, one at a time, each given -high-wait
// (default 30s) to start; one that did not is deleted. A pod deleted by
// someone else (the scheduler's preemption) is stopped as its kubelet
// would and its LPUs freed; the device-plugin side then picks as it does
// for every pod (pkg/alloc; strict refuses a scattered set). Per arm:
// high-priority pods started and how many on an arc, refused, wait
// p50/p99 over every high pod (one not started within -high-wait counts
// as never), preemptions and their victims against the fewest possible
// (per node, the fewest low-priority pods whose LPUs complete a free arc,
// tried over every arc; the best node), and victims that freed nothing
// (evicted on a node where their preemptor then did not start on an
// arc). Output: a table on stdout and results-priority-N.csv in -out.
//
//	go run ./cluster -workload priority -nodes 6
//
// # Bad input
//
// Before starting it estimates the memory the run needs and refuses a node
// count the machine cannot hold. It records its PID, the components' PIDs
// and binaries, ports and temporary directory in
// $TMPDIR/lpu-cluster-bench.json; the next run kills what a killed run
// left (by PID, only if it still runs the recorded binary), removes its
// directory and reports ports still held. An object the API server refuses
// is printed with the server's reason.
package main

// Package faults keeps lpu-dra's history of LPU faults: each time an LPU
// turns unhealthy it is counted, and the counts of the last Window are what
// every arc publishes as its recentFaults attribute, so that a claim's CEL
// selector can keep away from LPUs that failed recently even after they
// recovered.
//
// The history lives in a file in the state dir, written atomically after
// every new fault, so a restart or an upgrade of the driver keeps it. A
// fault is a turn to unhealthy, not a time spent unhealthy: an LPU that
// stays sick across a restart is not counted twice. During a rolling
// update both driver pods observe the same LPUs and write the same file;
// the history of the pod that writes last is kept.
//
//	l, err := faults.Open(filepath.Join(stateDir, faults.FileName), time.Now)
//	changed := l.Observe(sick) // the IDs unhealthy now
//	counts := l.Counts()       // faults per LPU in the last Window
package faults

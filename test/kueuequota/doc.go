// Package kueuequota runs the real Kueue manager (v0.17, built and cached
// by test/e2e/tools.sh kueue) against a real control plane
// (internal/clustertest) with the Kueue configuration and queues the repo
// ships in deploy/kueue, and checks that a ClusterQueue of 8 LPUs admits
// two 4-LPU Jobs and holds the third until one ends: in device-plugin mode
// (hyperaccel.ai/lpu), in DRA mode with the extended-resource form
// (hyperaccel.ai/lpu-arc-4: 1, counted as 4 LPUs by a transformation) and
// with claim templates (counted in arcs of their size, which is what
// Kueue can count), and that Kueue refuses the best-effort templates.
//
// It has only tests; the package exists for them.
package kueuequota

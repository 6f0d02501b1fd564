// Package workloadcheck is `lpu-nri check`, run inside a container that
// asked for LPUs (the chart's `helm test` pod): it checks what the
// container was given, as the workload sees it. NUM_LPU_DEVICES and
// LPU_VISIBLE_DEVICES must name the expected count, and the container's
// /dev must hold LPU device nodes the device cgroup lets it open.
//
// A container only sees the standard nodes (null, zero, tty, ...) and the
// ones injected for it, so every other character device under /dev is
// taken as injected. Opening one is the cgroup check: the kernel's device
// cgroup (v1 list or v2 eBPF program) refuses with EPERM before any
// driver runs; an open that reaches the driver passes, including ENXIO or
// ENODEV when no driver serves the node (numbers of a devicesim tree). A
// /dev with more than four nodes per LPU asked for is a host's or a
// privileged container's: the check fails without opening anything there
// (a watchdog node arms on open).
package workloadcheck

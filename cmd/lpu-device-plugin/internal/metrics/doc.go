// Package metrics is lpu-device-plugin's Prometheus endpoint: its own
// registry served on /metrics, with /healthz and /readyz probes.
//
// Series:
//
//   - lpu_device_healthy{node,device}: the health reported to the kubelet;
//   - lpu_utilization_percent, lpu_memory_used_bytes,
//     lpu_memory_total_bytes, lpu_temperature_celsius, lpu_power_watts
//     {node,device,pod,namespace,container}: sysfs telemetry read at scrape
//     time, labelled with the holder from the kubelet's PodResources List
//     (empty labels when the device is free or PodResources is unavailable);
//   - lpu_largest_free_arc{node,ring}: the longest run of healthy, unheld
//     ring neighbours;
//   - lpu_allocations_total{result=contiguous|noncontiguous|refused},
//     lpu_preferred_allocation_duration_seconds,
//     lpu_allocate_duration_seconds, lpu_registrations_total: recorded by
//     the plugin (Metrics implements plugin.Recorder).
//
// Example:
//
//	m := metrics.New(metrics.Options{Node: node, Devices: monitor, Telemetry: sysfs,
//		Holders: podresources.New(cfg.Kubelet.PodResourcesSocket, cfg.ResourceName)})
//	go m.Serve(ctx, ":9400", healthz, readyz, log)
package metrics

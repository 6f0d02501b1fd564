// Package metrics is lpu-device-plugin's Prometheus registry, which
// internal/metricsserver serves on /metrics beside the /healthz and
// /readyz probes.
//
// Series:
//
//   - the node-level series of internal/devicemetrics (lpu_device_healthy,
//     lpu_device_info, the telemetry gauges, lpu_build_info), telemetry
//     labelled with the holder from the kubelet's PodResources List (empty
//     labels when the device is free or PodResources is unavailable);
//   - lpu_device_allocated{node,device}: 1 while a container holds the
//     device; absent while PodResources is unavailable;
//   - lpu_largest_free_arc{node,ring}: the longest run of healthy, unheld
//     ring neighbours;
//   - lpu_allocations_total{result=contiguous|noncontiguous|refused},
//     lpu_preferred_allocation_duration_seconds,
//     lpu_allocate_duration_seconds, lpu_registrations_total: recorded by
//     the plugin (Metrics implements plugin.Recorder).
//
// One scrape reads the devices and the holders once (devicemetrics Read),
// for both the node-level and the holder series.
//
// Example:
//
//	m := metrics.New(metrics.Options{Node: node, Devices: monitor, Telemetry: sysfs,
//		Holders: podresources.New(cfg.Kubelet.PodResourcesSocket, cfg.ResourceName)})
//	go metricsserver.Serve(ctx, ":9400", metricsserver.Handler(m.Registry, healthz, readyz), log)
package metrics

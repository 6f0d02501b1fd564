// Package devicemetrics owns the node-level Prometheus series, exported by
// whichever allocator serves the node (lpu-device-plugin or lpu-dra) so a
// device-plugin node and a DRA node report their devices alike:
//
//   - lpu_device_healthy{node,device}: the health the allocator reports;
//   - lpu_device_info{node,device,model,firmware,driver}: always 1;
//   - lpu_utilization_percent, lpu_memory_used_bytes,
//     lpu_memory_total_bytes, lpu_temperature_celsius, lpu_power_watts
//     {node,device,pod,namespace,container}: sysfs telemetry read at scrape
//     time, labelled with the holder when a HolderLister knows it (empty
//     labels otherwise);
//   - lpu_build_info{daemon,version,goversion}: always 1 (NewBuildInfo, the
//     one builder of that gauge, which lpu-nri uses too).
//
// A daemon registers the collector on its registry; one that adds series
// of its own from the same reading (the device plugin's holder series)
// calls Read once per scrape and Emit:
//
//	reg := prometheus.NewRegistry()
//	reg.MustRegister(devicemetrics.New(devicemetrics.Options{
//		Node: node, Daemon: "lpu-dra", Version: version, Devices: monitor, Telemetry: sysfs}))
package devicemetrics

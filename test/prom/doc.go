// Package prom runs the chart's alerts and Grafana dashboard on the real
// Prometheus (the distribution's 2.42 package, test/e2e/tools.sh
// prometheus): `promtool test rules` cases for every alert of the rendered
// PrometheusRule, and a Prometheus on 127.0.0.1 scraping the real daemons
// of a simulated node in both chart modes, where injected faults must turn
// the alerts pending or firing and every dashboard query must return data.
// The package has tests only; see its test files and docs/observability.md.
package prom

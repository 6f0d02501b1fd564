// Package chartcheck checks the chart's Prometheus rules and Grafana
// dashboard with Prometheus's own parsers (model/rulefmt, promql/parser):
// every rule file loads as promtool would load it, every metric a rule or a
// panel names is one a daemon of its mode exports, and every alert has its
// runbook in docs/observability.md. It lives in test/prom's module so that
// the product's module does not depend on github.com/prometheus/prometheus.
package chartcheck

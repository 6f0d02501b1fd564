package prom

import (
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// knownScrapeGaps are daemons of a mode whose metrics port the chart's
// ServiceMonitor does not reach, as "mode/container" with the reason. The
// live test scrapes them anyway (it adds their target itself); a gap that
// is fixed must be removed from here.
var knownScrapeGaps = map[string]string{}

// chartObject is the part of a rendered object the scrape check reads.
type chartObject struct {
	Kind string `json:"kind"`
	Spec struct {
		Ports []struct {
			Name       string `json:"name"`
			TargetPort any    `json:"targetPort"`
		} `json:"ports"`
		Endpoints []struct {
			Port string `json:"port"`
		} `json:"endpoints"`
		Template struct {
			Spec struct {
				Containers []struct {
					Name  string `json:"name"`
					Ports []struct {
						Name string `json:"name"`
					} `json:"ports"`
				} `json:"containers"`
			} `json:"spec"`
		} `json:"template"`
	} `json:"spec"`
}

// renderChart renders the whole chart with sets and returns its objects.
func renderChart(t *testing.T, sets ...string) []chartObject {
	t.Helper()
	out := helmTemplate(t, "", sets...)
	var objs []chartObject
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(out), -1) {
		var o chartObject
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatalf("rendered object: %v\n%s", err, doc)
		}
		if o.Kind != "" {
			objs = append(objs, o)
		}
	}
	return objs
}

// scrapedPorts returns the container port names the ServiceMonitor's
// endpoints reach through the Service, and every DaemonSet container's
// metrics port as container -> port name.
func scrapedPorts(objs []chartObject) (reached map[string]bool, metricsPorts map[string]string) {
	endpoints := map[string]bool{}
	reached, metricsPorts = map[string]bool{}, map[string]string{}
	for _, o := range objs {
		if o.Kind == "ServiceMonitor" {
			for _, e := range o.Spec.Endpoints {
				endpoints[e.Port] = true
			}
		}
	}
	for _, o := range objs {
		switch o.Kind {
		case "Service":
			for _, p := range o.Spec.Ports {
				if tp, ok := p.TargetPort.(string); ok && endpoints[p.Name] {
					reached[tp] = true
				}
			}
		case "DaemonSet":
			for _, c := range o.Spec.Template.Spec.Containers {
				for _, p := range c.Ports {
					if strings.HasPrefix(p.Name, "metrics-") {
						metricsPorts[c.Name] = p.Name
					}
				}
			}
		}
	}
	return reached, metricsPorts
}

// TestChartScrapesEveryDaemon: in each mode, the chart's ServiceMonitor
// reaches, through its Service, the metrics port of every container of its
// DaemonSets, except the gaps listed in knownScrapeGaps (and a listed gap
// that no longer exists fails too).
func TestChartScrapesEveryDaemon(t *testing.T) {
	for _, mode := range []string{modeDevicePlugin, modeDRA} {
		reached, ports := scrapedPorts(renderChart(t, "mode="+mode, "metrics.serviceMonitor.enabled=true"))
		if len(ports) < 2 {
			t.Errorf("mode %s: metrics ports %v, want every daemon's", mode, ports)
		}
		for c, port := range ports {
			gap, known := knownScrapeGaps[mode+"/"+c]
			switch {
			case !reached[port] && !known:
				t.Errorf("mode %s: the ServiceMonitor does not scrape container %s (port %s)", mode, c, port)
			case !reached[port]:
				t.Logf("mode %s: known gap, container %s not scraped: %s", mode, c, gap)
			case known:
				t.Errorf("mode %s: container %s is scraped now; remove it from knownScrapeGaps", mode, c)
			}
		}
	}
}

package lpunode_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// operatorPages are the pages an operator copies commands from.
func operatorPages(t *testing.T) []string {
	t.Helper()
	pages := []string{"README.md", "deploy/README.md", "deploy/helm/lpu-node/templates/NOTES.txt"}
	for _, g := range []string{"docs/*.md", "docs/*/*.md"} {
		m, err := filepath.Glob(g)
		if err != nil {
			t.Fatal(err)
		}
		pages = append(pages, m...)
	}
	return pages
}

// setValue finds a chart value set on a helm command line: --set,
// --set-json or --set-string KEY=.
var setValue = regexp.MustCompile(`--set(?:-json|-string)?[ =]'?([A-Za-z][A-Za-z0-9_.]*)=`)

// TestDocsChartValuesExist: every value the pages set with helm's --set
// exists in the chart's values.yaml (or its schema, for the config keys
// values.yaml leaves at their defaults).
func TestDocsChartValuesExist(t *testing.T) {
	values := map[string]any{}
	if err := yaml.Unmarshal([]byte(doc(t, "deploy/helm/lpu-node/values.yaml")), &values); err != nil {
		t.Fatal(err)
	}
	schema := map[string]any{}
	if err := yaml.Unmarshal([]byte(doc(t, "deploy/helm/lpu-node/values.schema.json")), &schema); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, page := range operatorPages(t) {
		for _, m := range setValue.FindAllStringSubmatch(doc(t, page), -1) {
			n++
			if !valueExists(values, schema, strings.Split(m[1], ".")) {
				t.Errorf("%s sets %s, which deploy/helm/lpu-node/values.yaml does not have", page, m[1])
			}
		}
	}
	if n < 5 {
		t.Fatalf("found only %d --set examples", n)
	}
}

// valueExists says whether the dotted path is a key of values, or a
// property of the values schema.
func valueExists(values, schema map[string]any, path []string) bool {
	v, s := any(values), any(schema)
	for _, k := range path {
		if m, ok := v.(map[string]any); ok {
			v = m[k]
		} else {
			v = nil
		}
		if m, ok := s.(map[string]any); ok {
			props, _ := m["properties"].(map[string]any)
			s = props[k]
		} else {
			s = nil
		}
		if v == nil && s == nil {
			return false
		}
	}
	return true
}

// daemonCommand finds a daemon's command line in a page: the binary's
// name, then its words up to the end of the code span or line.
var daemonCommand = regexp.MustCompile("(?m)(?:^|[ /`(])(lpu-device-plugin|lpu-nri|lpu-dra)((?: [^`\n|;]*)?)")

// TestDocsDaemonFlagsExist: every --flag the pages show on a daemon's
// command line (lpu-nri doctor --other-fingerprints, lpu-dra --kubeconfig)
// is one that daemon defines.
func TestDocsDaemonFlagsExist(t *testing.T) {
	src := map[string]string{}
	for _, bin := range []string{"lpu-device-plugin", "lpu-nri", "lpu-dra"} {
		src[bin] = sources(t, "cmd/"+bin) + sources(t, "internal/startup") + sources(t, "internal/cmdline")
	}
	n := 0
	flag := regexp.MustCompile(`(?:^|[ [])--([a-z][a-z0-9-]+)`)
	for _, page := range operatorPages(t) {
		for _, m := range daemonCommand.FindAllStringSubmatch(doc(t, page), -1) {
			for _, f := range uniq(flag, m[2], 1) {
				n++
				if !strings.Contains(src[m[1]], `"`+f+`"`) {
					t.Errorf("%s shows %s --%s, which %s does not define", page, m[1], f, m[1])
				}
			}
		}
	}
	if n < 10 {
		t.Fatalf("found only %d daemon flags in the pages", n)
	}
}

// TestDocsChecksCatchErrors: the patterns above find what they must.
func TestDocsChecksCatchErrors(t *testing.T) {
	if m := setValue.FindStringSubmatch("helm install x --set dra.prefilter.enabeld=false"); m == nil || m[1] != "dra.prefilter.enabeld" {
		t.Errorf("--set not found: %v", m)
	}
	values := map[string]any{"dra": map[string]any{"prefilter": map[string]any{"enabled": true}}}
	if valueExists(values, nil, []string{"dra", "prefilter", "enabeld"}) || !valueExists(values, nil, []string{"dra", "prefilter", "enabled"}) {
		t.Error("valueExists does not tell a value from a misspelt one")
	}
	m := daemonCommand.FindStringSubmatch("run `/usr/bin/lpu-nri doctor --other-fingerprints a,b` on the node")
	if m == nil || m[1] != "lpu-nri" || !slices.Contains(uniq(regexp.MustCompile(`(?:^| )--([a-z][a-z0-9-]+)`), m[2], 1), "other-fingerprints") {
		t.Errorf("daemon command not found: %q", m)
	}
	if _, err := os.Stat("deploy/helm/lpu-node/values.yaml"); err != nil {
		t.Fatal(err)
	}
}

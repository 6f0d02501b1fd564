package chartcheck

import (
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// runbookBase is where every alert's runbook_url points: the Runbooks
// section of docs/observability.md as the repository renders it.
const runbookBase = "https://github.com/hyperaccel/lpu-node/blob/main/docs/observability.md#"

// runbookHeading is a runbook's heading: "### <AlertName>".
var runbookHeading = regexp.MustCompile(`(?m)^### (LPU[A-Za-z]+)\s*$`)

// runbookSections returns the alert names of the "### " headings in the
// "## Runbooks" section of the document.
func runbookSections(t *testing.T, doc string) []string {
	t.Helper()
	_, section, ok := strings.Cut(doc, "\n## Runbooks\n")
	if !ok {
		t.Fatal("docs/observability.md has no \"## Runbooks\" section")
	}
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	var names []string
	for _, m := range runbookHeading.FindAllStringSubmatch(section, -1) {
		names = append(names, m[1])
	}
	return names
}

// checkRunbooks returns what is wrong between the rules and the runbook
// headings: an alert whose runbook_url is not runbookBase plus its
// heading's anchor (GitHub lower-cases a heading of letters), or a
// runbook for an alert the chart does not ship.
func checkRunbooks(alerts map[string]string, headings []string) []string {
	var bad []string
	for _, name := range slices.Sorted(maps.Keys(alerts)) {
		if want := runbookBase + strings.ToLower(name); alerts[name] != want {
			bad = append(bad, "alert "+name+": runbook_url "+alerts[name]+", want "+want)
		}
		if !slices.Contains(headings, name) {
			bad = append(bad, "alert "+name+": no \"### "+name+"\" runbook in docs/observability.md")
		}
	}
	for _, h := range headings {
		if _, ok := alerts[h]; !ok {
			bad = append(bad, "runbook "+h+" names no alert of the chart")
		}
	}
	return bad
}

// TestRunbookAnchors: every alert of the rule file links its own runbook
// section, every runbook section is for a shipped alert, and the check
// catches a missing section, a wrong link and an orphan section.
func TestRunbookAnchors(t *testing.T) {
	content, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("../../../docs/observability.md")
	if err != nil {
		t.Fatal(err)
	}
	alerts := map[string]string{}
	for _, g := range parseRules(t, rulesFile, content).Groups {
		for _, r := range g.Rules {
			alerts[r.Alert] = r.Annotations["runbook_url"]
		}
	}
	headings := runbookSections(t, string(doc))
	for _, bad := range checkRunbooks(alerts, headings) {
		t.Error(bad)
	}

	name := slices.Sorted(maps.Keys(alerts))[0]
	wrongLink := maps.Clone(alerts)
	wrongLink[name] = runbookBase + "runbooks"
	for what, c := range map[string]struct {
		alerts   map[string]string
		headings []string
	}{
		"a missing section": {alerts, slices.DeleteFunc(slices.Clone(headings), func(h string) bool { return h == name })},
		"a wrong link":      {wrongLink, headings},
		"an orphan section": {alerts, append(slices.Clone(headings), "LPUNoSuchAlert")},
	} {
		if bad := checkRunbooks(c.alerts, c.headings); len(bad) != 1 {
			t.Errorf("%s: check reports %q, want one finding", what, bad)
		}
	}
}

// Package lpunode_test keeps the README and the docs honest: the metric
// names (docs/observability.md) and the flags (docs/configuration.md) they
// document are the ones the daemons define, their config examples load,
// and the README's layout table lists every package.
package lpunode_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/hyperaccel/lpu-node/config"
)

// sources returns the text of every non-test Go file under dir.
func sources(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		data, err := os.ReadFile(path)
		b.Write(data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func readme(t *testing.T) string {
	t.Helper()
	return doc(t, "README.md")
}

// doc returns the text of the Markdown file at path.
func doc(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// The pages that document what the tests below check.
const (
	metricsPage = "docs/observability.md"
	flagsPage   = "docs/configuration.md"
)

// configPages hold YAML examples of the config file.
var configPages = []string{"docs/configuration.md", "docs/hardware.md"}

func uniq(re *regexp.Regexp, s string, group int) []string {
	var out []string
	for _, m := range re.FindAllStringSubmatch(s, -1) {
		if !slices.Contains(out, m[group]) {
			out = append(out, m[group])
		}
	}
	slices.Sort(out)
	return out
}

func TestReadmeMetricsMatchCode(t *testing.T) {
	// The node-level series live in internal/devicemetrics, the rest in cmd/.
	code := uniq(regexp.MustCompile(`"(lpu_[a-z_]+)"`), sources(t, "cmd")+sources(t, "internal"), 1)
	code = slices.DeleteFunc(code, func(n string) bool {
		return strings.HasSuffix(n, "_count") || strings.HasSuffix(n, "_bucket") || strings.HasSuffix(n, "_sum")
	})
	if len(code) < 10 {
		t.Fatalf("found only %d metric names in cmd/: %v", len(code), code)
	}
	documented := uniq(regexp.MustCompile("`(lpu_[a-z_]+)[`{]"), doc(t, metricsPage), 1)
	for _, n := range code {
		if !slices.Contains(documented, n) {
			t.Errorf("metric %s is defined in cmd/ or internal/ but missing from the metrics table of %s", n, metricsPage)
		}
	}
	for _, n := range documented {
		if !slices.Contains(code, n) {
			t.Errorf("%s documents metric %s, which no daemon defines", metricsPage, n)
		}
	}
}

func TestReadmeFlagsExist(t *testing.T) {
	text := doc(t, flagsPage)
	// internal/startup declares --nfd-features-file for the two allocators.
	for bin, dirs := range map[string][]string{"lpu-device-plugin": {"cmd/lpu-device-plugin", "internal/startup"}, "lpu-nri": {"cmd/lpu-nri"}, "lpu-dra": {"cmd/lpu-dra", "internal/startup"}} {
		dir := dirs[0]
		var src string
		for _, d := range dirs {
			src += sources(t, d)
		}
		// The usage lines start with the binary's name.
		re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(bin) + ` .*(?:\n {2,}.*)*`)
		var flags []string
		for _, block := range re.FindAllString(text, -1) {
			flags = append(flags, uniq(regexp.MustCompile(`--([a-z][a-z-]+)`), block, 1)...)
		}
		if len(flags) == 0 {
			t.Fatalf("no usage lines for %s in %s", bin, flagsPage)
		}
		for _, f := range flags {
			if !strings.Contains(src, `"`+f+`"`) {
				t.Errorf("%s documents %s --%s, which %s does not define", flagsPage, bin, f, dir)
			}
		}
	}
}

// TestReadmeConfigExamplesLoad: every YAML example in the config pages is
// a config file the daemons accept.
func TestReadmeConfigExamplesLoad(t *testing.T) {
	for _, page := range configPages {
		blocks := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(doc(t, page), -1)
		if len(blocks) == 0 {
			t.Fatalf("no yaml examples in %s", page)
		}
		for i, b := range blocks {
			if _, err := config.Parse([]byte(b[1])); err != nil {
				t.Errorf("%s yaml example %d does not load: %v", page, i+1, err)
			}
		}
	}
}

// TestReadmeLayoutListsEveryPackage: the "Layout of the tree" table names
// every directory holding Go files (but the repository root), each other
// module by its root alone, and no row names a directory that holds none.
func TestReadmeLayoutListsEveryPackage(t *testing.T) {
	text := readme(t)
	start := strings.Index(text, "Layout of the tree")
	if start < 0 {
		t.Fatal(`no "Layout of the tree" in the README`)
	}
	table := text[start:]
	if i := strings.Index(table, "| path | owns |"); i >= 0 {
		table = table[i:]
	}
	if i := strings.Index(table, "\n\n"); i >= 0 {
		table = table[:i] // the table ends at the first blank line
	}
	var rows []string
	for _, m := range regexp.MustCompile("(?m)^\\| `([^`]+)` \\|").FindAllStringSubmatch(table, -1) {
		rows = append(rows, m[1])
	}
	var pkgs []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		// A module of its own (test/dravalidate, lab) is one row: its
		// packages are not this module's.
		if d.IsDir() && path != "." {
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				pkgs = append(pkgs, path)
				return filepath.SkipDir
			}
		}
		if !d.IsDir() && strings.HasSuffix(path, ".go") {
			if dir := filepath.Dir(path); dir != "." && !slices.Contains(pkgs, dir) {
				pkgs = append(pkgs, dir)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) < 20 {
		t.Fatalf("found only %d package directories: %v", len(pkgs), pkgs)
	}
	for _, p := range pkgs {
		if !slices.Contains(rows, p) {
			t.Errorf("package %s is missing from the README's layout table", p)
		}
	}
	for _, r := range rows {
		if !slices.Contains(pkgs, r) {
			t.Errorf("the README's layout table names %s, which holds no Go package", r)
		}
	}
	checkLayoutGroups(t, table)
}

// checkLayoutGroups: every row of the layout table sits under the header
// row ("| **Daemons …** | |") of its layer, as layers_test.go defines them.
func checkLayoutGroups(t *testing.T, table string) {
	t.Helper()
	group := ""
	header := regexp.MustCompile(`^\| \*\*([A-Za-z ]+)`)
	row := regexp.MustCompile("^\\| `([^`]+)` \\|")
	for _, line := range strings.Split(table, "\n") {
		if m := header.FindStringSubmatch(line); m != nil {
			group = strings.TrimSpace(m[1])
			continue
		}
		m := row.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		if want := layoutGroup(m[1]); !strings.HasPrefix(group, want) {
			t.Errorf("the README's layout table lists %s under %q, want under %q", m[1], group, want)
		}
	}
}

// layoutGroup names the layer of a package directory.
func layoutGroup(path string) string {
	switch {
	case testKit(path) || under(path, "test") || under(path, "lab"):
		return "Test kits"
	case under(path, "cmd"):
		return "Daemons"
	case slices.Contains(plumbing, path):
		return "Plumbing"
	case under(path, "internal"):
		return "Node services"
	case under(path, "pkg") || path == "config":
		return "Domain"
	case under(path, "deploy"):
		return "Release"
	}
	return "?"
}

package lpunode_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// module is this repository's module path.
const module = "github.com/hyperaccel/lpu-node"

// The layers, bottom up (the README's layout table groups packages by them):
//
//   - leaves: plumbing every tier may use; they import nothing of ours;
//   - domain (pkg/...): discovery, allocation, injection; imports only
//     pkg/... and the leaves;
//   - config: imports neither internal/... nor cmd/...;
//   - node services and plumbing (internal/...): never cmd/...; each used
//     by at least two commands (else it belongs under that command);
//   - daemons (cmd/...): a command's main and its internal/daemon wiring are
//     the only importers of the start-up plumbing (startupPkgs);
//   - the lab (lab/, a module of its own): the product never imports it,
//     and none of this module's packages lives there.
//
// Only production imports count: tests may reach across tiers.
var (
	leaves      = []string{"internal/atomicfile", "internal/statedir"}
	startupPkgs = []string{"internal/startup", "internal/cmdline"}
	// plumbing is the README's "Plumbing and leaves" group: the leaves,
	// the start-up packages and the retry helpers.
	plumbing = append(append([]string{"internal/backoff", "internal/logchange"}, leaves...), startupPkgs...)
)

// testKit reports whether path is a test kit (named <what>test, as
// internal/nritest or pkg/device/devicetest): kits serve the tests of
// every tier and are exempt from the two-commands rule.
func testKit(path string) bool {
	return strings.HasSuffix(path[strings.LastIndex(path, "/")+1:], "test")
}

// pkgInfo is one package of `go list -json`: its path relative to the
// module, whether it is a command, and the module's packages it imports.
type pkgInfo struct {
	Path    string
	Command bool
	Imports []string
	Deps    []string // transitive, the module's packages only
}

// listPackages runs `go list -json ./...` and keeps the module's imports.
func listPackages(t *testing.T) []pkgInfo {
	t.Helper()
	out, err := exec.Command("go", "list", "-json=ImportPath,Name,Imports,Deps", "./...").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list: %v: %s", err, ee.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	var pkgs []pkgInfo
	for {
		var p struct {
			ImportPath, Name string
			Imports, Deps    []string
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decode go list: %v", err)
		}
		pkgs = append(pkgs, pkgInfo{Path: rel(p.ImportPath), Command: p.Name == "main",
			Imports: ours(p.Imports), Deps: ours(p.Deps)})
	}
	return pkgs
}

// rel strips the module path ("" for the root package).
func rel(path string) string {
	if path == module {
		return ""
	}
	return strings.TrimPrefix(path, module+"/")
}

// ours keeps the module's packages among paths, relative.
func ours(paths []string) []string {
	var out []string
	for _, p := range paths {
		if p == module || strings.HasPrefix(p, module+"/") {
			out = append(out, rel(p))
		}
	}
	return out
}

// under reports whether path is dir or inside it.
func under(path, dir string) bool { return path == dir || strings.HasPrefix(path, dir+"/") }

// daemonWiring reports whether path is a command's main or its
// cmd/<name>/internal/daemon package.
func daemonWiring(path string) bool {
	parts := strings.Split(path, "/")
	return parts[0] == "cmd" && (len(parts) == 2 || (len(parts) == 4 && parts[2] == "internal" && parts[3] == "daemon"))
}

// layerViolations returns every import that breaks the layers, one line
// each, sorted.
func layerViolations(pkgs []pkgInfo) []string {
	var bad []string
	report := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }
	users := map[string][]string{} // internal package -> commands depending on it
	for _, p := range pkgs {
		if p.Command && under(p.Path, "cmd") {
			for _, d := range p.Deps {
				if under(d, "internal") {
					users[d] = append(users[d], p.Path)
				}
			}
		}
	}
	for _, p := range pkgs {
		if under(p.Path, "lab") {
			report("%s is in the product's module: lab/ is a module of its own (lab/go.mod)", p.Path)
		}
		for _, imp := range p.Imports {
			switch {
			case under(imp, "lab"):
				report("%s imports %s: the product never imports the lab", p.Path, imp)
			case slices.Contains(leaves, p.Path):
				report("%s is a leaf but imports %s", p.Path, imp)
			case under(p.Path, "pkg") && !under(imp, "pkg") && !slices.Contains(leaves, imp):
				report("%s (domain) imports %s: pkg/ may import only pkg/ and the leaves %v", p.Path, imp, leaves)
			case under(p.Path, "config") && (under(imp, "internal") || under(imp, "cmd")):
				report("%s imports %s: config may not import internal/ or cmd/", p.Path, imp)
			case under(p.Path, "internal") && under(imp, "cmd"):
				report("%s imports %s: internal/ may not import cmd/", p.Path, imp)
			case slices.Contains(startupPkgs, imp) && !daemonWiring(p.Path) && !slices.Contains(startupPkgs, p.Path):
				report("%s imports %s: only a command's main and its internal/daemon wiring may (components take a *slog.Logger)", p.Path, imp)
			}
		}
		if under(p.Path, "internal") && !testKit(p.Path) && len(users[p.Path]) < 2 {
			report("%s is used by %d command(s) %v: an internal/ package serves at least two, else it moves under its command", p.Path, len(users[p.Path]), users[p.Path])
		}
	}
	slices.Sort(bad)
	return bad
}

func TestLayers(t *testing.T) {
	pkgs := listPackages(t)
	if len(pkgs) < 20 {
		t.Fatalf("go list found %d packages; run from the module root", len(pkgs))
	}
	for _, v := range layerViolations(pkgs) {
		t.Error(v)
	}
}

// TestLayerRules feeds the rules a graph breaking each one once, so a rule
// that stops catching anything fails here.
func TestLayerRules(t *testing.T) {
	pkgs := []pkgInfo{
		{Path: "cmd/a", Command: true, Imports: []string{"cmd/a/internal/daemon"}, Deps: []string{"cmd/a/internal/daemon", "internal/startup", "internal/shared", "internal/lonely", "internal/atomicfile"}},
		{Path: "cmd/b", Command: true, Deps: []string{"internal/shared", "internal/startup", "internal/atomicfile"}},
		{Path: "cmd/a/internal/daemon", Imports: []string{"internal/startup", "internal/lonely"}},
		{Path: "cmd/a/internal/part", Imports: []string{"internal/cmdline"}},
		{Path: "internal/startup", Imports: []string{"internal/cmdline"}},
		{Path: "internal/shared", Imports: []string{"cmd/a/internal/part"}},
		{Path: "internal/lonely"},
		{Path: "internal/nritest", Imports: []string{"pkg/x"}},
		{Path: "internal/atomicfile", Imports: []string{"pkg/x"}},
		{Path: "pkg/x", Imports: []string{"internal/statedir", "pkg/y", "internal/shared"}},
		{Path: "config", Imports: []string{"pkg/x", "internal/shared"}},
		{Path: "deploy", Imports: []string{"lab/churn"}},
		{Path: "lab/sim"},
	}
	got := layerViolations(pkgs)
	want := []string{
		"cmd/a/internal/part imports internal/cmdline",
		"config imports internal/shared",
		"deploy imports lab/churn",
		"internal/atomicfile is a leaf but imports pkg/x",
		"internal/lonely is used by 1",
		"internal/shared imports cmd/a/internal/part",
		"lab/sim is in the product's module",
		"pkg/x (domain) imports internal/shared",
	}
	if len(got) != len(want) {
		t.Fatalf("got %d violations, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for i, w := range want {
		if !strings.HasPrefix(got[i], w) {
			t.Errorf("violation %d = %q, want it to start with %q", i, got[i], w)
		}
	}
}

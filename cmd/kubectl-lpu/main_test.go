package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/kube-openapi/pkg/validation/spec"
	"k8s.io/kube-openapi/pkg/validation/strfmt"
	"k8s.io/kube-openapi/pkg/validation/validate"
)

func TestRunBadInput(t *testing.T) {
	tests := map[string]struct {
		args []string
		want string
	}{
		"no command":      {nil, "want a command"},
		"unknown command": {[]string{"arcs"}, `unknown command "arcs"`},
		"bad format":      {[]string{"nodes", "-o", "xml"}, `-o "xml"`},
		"bad jsonpath":    {[]string{"nodes", "-o", "jsonpath={.nodes["}, "jsonpath"},
		"bad selector":    {[]string{"pods", "-l", "a in (", "--kubeconfig", "/nonexistent/kubeconfig"}, `-l "a in ("`},
		"missing config":  {[]string{"pods", "--kubeconfig", "/nonexistent/kubeconfig"}, "kubeconfig"},
		"old flag style":  {[]string{"pods", "-kubeconfig", "/nonexistent/kubeconfig"}, "unknown shorthand flag"},
		// nodes takes one NODE (it reads the cluster, so the missing
		// kubeconfig is what fails), not two.
		"nodes NODE":      {[]string{"nodes", "node-a", "--kubeconfig", "/nonexistent/kubeconfig"}, "kubeconfig"},
		"nodes two names": {[]string{"nodes", "node-a", "node-b"}, "accepts at most 1 arg"},
		// a bad LPU ID is refused before the cluster is asked
		"cordon bad ID":   {[]string{"cordon", "node-a", "lpu03", "--kubeconfig", "/nonexistent/kubeconfig"}, `LPU "lpu03": want an LPU ID such as lpu3`},
		"uncordon no LPU": {[]string{"uncordon", "node-a"}, "accepts 2 arg(s)"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := run(tc.args, io.Discard, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("run %v: %v, want %q", tc.args, err, tc.want)
			}
		})
	}
}

// TestVersionClient: the version the build stamps (main.version) is what
// --version and `version --client` print, as a table and as a versioned
// document.
func TestVersionClient(t *testing.T) {
	defer func(v string) { version = v }(version)
	version = "1.2.3"
	if out := runOK(t, "--version"); out != "kubectl-lpu 1.2.3\n" {
		t.Errorf("--version: %q", out)
	}
	if out := runOK(t, "version", "--client"); out != "Client Version: 1.2.3\n" {
		t.Errorf("version --client: %q", out)
	}
	out := runOK(t, "version", "--client", "-o", "json")
	checkSchema(t, []byte(out))
	var v struct{ APIVersion, Kind, ClientVersion string }
	if err := json.Unmarshal([]byte(out), &v); err != nil || v.APIVersion != "lpu.hyperaccel.ai/v1alpha1" || v.Kind != "Version" || v.ClientVersion != "1.2.3" {
		t.Errorf("version -o json: %+v (%v)\n%s", v, err, out)
	}
	if out := runOK(t, "version", "--client", "-o", "yaml"); !strings.Contains(out, "clientVersion: 1.2.3\n") {
		t.Errorf("version -o yaml:\n%s", out)
	}
}

// TestCompletion: the completion scripts of each shell, the -o values
// offered, and kubectl's plugin completion executable name.
func TestCompletion(t *testing.T) {
	for shell, want := range map[string]string{"bash": "__start_kubectl-lpu", "zsh": "#compdef kubectl-lpu", "fish": "complete -c kubectl-lpu", "powershell": "Register-ArgumentCompleter"} {
		if out := runOK(t, "completion", shell); !strings.Contains(out, want) {
			t.Errorf("completion %s lacks %q", shell, want)
		}
	}
	out := runOK(t, "__complete", "nodes", "-o", "")
	for _, want := range []string{"json\n", "yaml\n", "wide\n", "name\n", "jsonpath=\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("completing -o: %q lacks %q", out, want)
		}
	}
	if out := runOK(t, "__complete", ""); !strings.Contains(out, "nodes\t") || !strings.Contains(out, "pods\t") || !strings.Contains(out, "version\t") ||
		!strings.Contains(out, "cordon\t") || !strings.Contains(out, "uncordon\t") {
		t.Errorf("completing the command: %q", out)
	}
	// NODE given, or no cluster to ask: nothing, and no file names.
	if out := runOK(t, "__complete", "nodes", "node-a", ""); !strings.HasPrefix(out, ":4\n") {
		t.Errorf("completing after NODE: %q", out)
	}
	if out := runOK(t, "__complete", "nodes", "--kubeconfig", "/nonexistent/kubeconfig", ""); !strings.HasPrefix(out, ":4\n") {
		t.Errorf("completing NODE without a cluster: %q", out)
	}
	if got := argsFor("/usr/local/bin/kubectl_complete-lpu", []string{"nodes", "-o", ""}); strings.Join(got, " ") != "__complete nodes -o " {
		t.Errorf("as kubectl_complete-lpu: args %q", got)
	}
	if got := argsFor("kubectl-lpu", []string{"nodes"}); strings.Join(got, " ") != "nodes" {
		t.Errorf("as kubectl-lpu: args %q", got)
	}
	script, err := os.ReadFile("kubectl_complete-lpu")
	if err != nil || !strings.Contains(string(script), `kubectl lpu __complete "$@"`) {
		t.Errorf("kubectl_complete-lpu script: %v\n%s", err, script)
	}
}

// runOK runs the command line and returns what it printed; it fails the
// test on an error.
func runOK(t *testing.T, args ...string) string {
	t.Helper()
	var out, errOut bytes.Buffer
	if err := run(args, &out, &errOut); err != nil {
		t.Fatalf("kubectl lpu %s: %v\n%s", strings.Join(args, " "), err, errOut.String())
	}
	return out.String()
}

// TestSchemaRejects: the schema check is not vacuous.
func TestSchemaRejects(t *testing.T) {
	for name, doc := range map[string]string{
		"no nodes":      `{"apiVersion":"lpu.hyperaccel.ai/v1alpha1","kind":"NodeList","dra":{"available":true},"summary":{"nodes":0,"total":0,"free":0,"arcs":{}}}`,
		"other version": `[{"apiVersion":"lpu.hyperaccel.ai/v1","kind":"Pod","namespace":"a","name":"b","node":"","count":0}]`,
		"unknown field": `[{"apiVersion":"lpu.hyperaccel.ai/v1alpha1","kind":"Pod","namespace":"a","name":"b","node":"","count":0,"lpu":1}]`,
		"bare array":    `[{"namespace":"a","name":"b","node":"","count":0}]`,
	} {
		if errs := schemaErrors(t, []byte(doc)); len(errs) == 0 {
			t.Errorf("%s: %s passes the schema", name, doc)
		}
	}
	if errs := schemaErrors(t, []byte(`[{"apiVersion":"lpu.hyperaccel.ai/v1alpha1","kind":"Pod","namespace":"a","name":"b","node":"n","count":2,"lpus":["lpu0","lpu1"],"contiguous":true}]`)); len(errs) > 0 {
		t.Errorf("a valid pod list fails: %v", errs)
	}
}

// checkSchema validates a document -o json printed against the shipped
// schema, schema/v1alpha1.json.
func checkSchema(t *testing.T, doc []byte) {
	t.Helper()
	if errs := schemaErrors(t, doc); len(errs) > 0 {
		t.Errorf("output does not match schema/v1alpha1.json: %v\n%s", errs, doc)
	}
}

// schemaErrors are the ways doc fails schema/v1alpha1.json.
func schemaErrors(t *testing.T, doc []byte) []error {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("schema", "v1alpha1.json"))
	if err != nil {
		t.Fatal(err)
	}
	var generic map[string]any
	if err := json.Unmarshal(raw, &generic); err != nil {
		t.Fatalf("schema: %v", err)
	}
	inlined, err := json.Marshal(inlineRefs(generic, generic["definitions"].(map[string]any)))
	if err != nil {
		t.Fatal(err)
	}
	var s spec.Schema
	if err := json.Unmarshal(inlined, &s); err != nil {
		t.Fatalf("schema: %v", err)
	}
	var data any
	if err := json.Unmarshal(doc, &data); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, doc)
	}
	return validate.NewSchemaValidator(&s, nil, "", strfmt.Default).Validate(data).Errors
}

// inlineRefs replaces each {"$ref": "#/definitions/X"} with definition X
// (the validator does not resolve references; the schema has no cycles).
func inlineRefs(v any, defs map[string]any) any {
	switch v := v.(type) {
	case map[string]any:
		if ref, ok := v["$ref"].(string); ok {
			return inlineRefs(defs[strings.TrimPrefix(ref, "#/definitions/")], defs)
		}
		out := map[string]any{}
		for k, e := range v {
			if k != "definitions" {
				out[k] = inlineRefs(e, defs)
			}
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = inlineRefs(e, defs)
		}
		return out
	}
	return v
}

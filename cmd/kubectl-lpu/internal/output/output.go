// Package output prints what `kubectl lpu` shows in the output kinds of
// kubectl: the default table (for nodes, the ring pictures), wide, json,
// yaml, name and jsonpath=TEMPLATE. JSON and YAML are versioned documents
// (APIVersion; the schema is cmd/kubectl-lpu/schema/v1alpha1.json): the
// nodes view is one NodeList, the pods view a JSON array of Pod objects
// (an array, as the scripts reading `.[]` before the version was added
// expect), `version` one Version.
package output

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"k8s.io/client-go/util/jsonpath"
	"sigs.k8s.io/yaml"

	"github.com/hyperaccel/lpu-node/cmd/kubectl-lpu/internal/view"
)

// APIVersion is the version of every document -o json and -o yaml print.
// A change that removes or renames a field, or changes its meaning, makes
// a new version; adding a field does not.
const APIVersion = "lpu.hyperaccel.ai/v1alpha1"

// Formats are the -o values (for help and shell completion); "" is the
// default table.
var Formats = []string{"json", "yaml", "wide", "name", "jsonpath="}

// NodeList is the nodes view's document.
type NodeList struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"` // NodeList
	// DRA says whether ResourceSlices and ResourceClaims were read.
	DRA     view.DRA     `json:"dra"`
	Nodes   []view.Node  `json:"nodes"`
	Summary view.Summary `json:"summary"`
}

// Pod is one element of the pods view's document.
type Pod struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"` // Pod
	view.Pod
}

// Version is the version command's document.
type Version struct {
	APIVersion    string `json:"apiVersion"`
	Kind          string `json:"kind"` // Version
	ClientVersion string `json:"clientVersion"`
	// ServerVersion is the API server's gitVersion; empty with --client.
	ServerVersion string `json:"serverVersion,omitempty"`
}

// View is something to print in every output kind.
type View interface {
	// Document is what -o json, yaml and jsonpath print.
	Document() any
	// Table is the default (wide false) or -o wide text.
	Table(wide bool) string
	// Names are the lines of -o name.
	Names() []string
}

// Nodes is the nodes view of a cluster.
type Nodes struct{ view.Cluster }

// Document is the NodeList.
func (n Nodes) Document() any {
	nodes := n.Cluster.Nodes
	if nodes == nil {
		nodes = []view.Node{}
	}
	return NodeList{APIVersion: APIVersion, Kind: "NodeList", DRA: n.DRA, Nodes: nodes, Summary: n.Summary}
}

// Table is the ring pictures and the summary.
func (n Nodes) Table(wide bool) string {
	if wide {
		return n.WideText()
	}
	return n.Text()
}

// Names are node/NAME.
func (n Nodes) Names() []string {
	out := make([]string, 0, len(n.Cluster.Nodes))
	for _, v := range n.Cluster.Nodes {
		out = append(out, "node/"+view.Printable(v.Name))
	}
	return out
}

// Pods is the pods view of a cluster.
type Pods struct{ view.Cluster }

// Document is the array of Pod objects.
func (p Pods) Document() any {
	out := make([]Pod, 0, len(p.Cluster.Pods))
	for _, v := range p.Cluster.Pods {
		out = append(out, Pod{APIVersion: APIVersion, Kind: "Pod", Pod: v})
	}
	return out
}

// Table is the pods table and the PodGroups.
func (p Pods) Table(wide bool) string {
	if wide {
		return p.PodsWideText()
	}
	return p.PodsText()
}

// Names are pod/NAME, as kubectl's (the namespace is not part of it).
func (p Pods) Names() []string {
	out := make([]string, 0, len(p.Cluster.Pods))
	for _, v := range p.Cluster.Pods {
		out = append(out, "pod/"+view.Printable(v.Name))
	}
	return out
}

// Table is `Client Version: …` and, when known, `Server Version: …`, as
// kubectl version prints.
func (v Version) Table(bool) string {
	s := "Client Version: " + v.ClientVersion + "\n"
	if v.ServerVersion != "" {
		s += "Server Version: " + view.Printable(v.ServerVersion) + "\n"
	}
	return s
}

// Document is v itself.
func (v Version) Document() any { return v }

// Names is the client version (kubectl has no -o name for version).
func (v Version) Names() []string { return []string{v.ClientVersion} }

// Check reports whether format is an -o value Write takes.
func Check(format string) error {
	switch {
	case format == "", format == "text", format == "wide", format == "json", format == "yaml", format == "name":
		return nil
	case strings.HasPrefix(format, "jsonpath="):
		_, err := parseJSONPath(strings.TrimPrefix(format, "jsonpath="))
		return err
	}
	return fmt.Errorf("-o %q: want one of %s (or the default table)", format, strings.Join(Formats, ", "))
}

// Write prints v to w in format ("" or "text" for the table).
func Write(w io.Writer, format string, v View) error {
	if err := Check(format); err != nil {
		return err
	}
	switch {
	case format == "" || format == "text" || format == "wide":
		_, err := io.WriteString(w, v.Table(format == "wide"))
		return err
	case format == "name":
		_, err := io.WriteString(w, strings.Join(append(v.Names(), ""), "\n"))
		return err
	case format == "yaml":
		b, err := yaml.Marshal(v.Document())
		if err != nil {
			return fmt.Errorf("encode yaml: %w", err)
		}
		_, err = w.Write(b)
		return err
	case format == "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v.Document())
	}
	return writeJSONPath(w, strings.TrimPrefix(format, "jsonpath="), v.Document())
}

func parseJSONPath(tmpl string) (*jsonpath.JSONPath, error) {
	j := jsonpath.New("output")
	if err := j.Parse(tmpl); err != nil {
		return nil, fmt.Errorf("-o jsonpath: %w", err)
	}
	return j, nil
}

// writeJSONPath runs the template over the document as -o json prints it
// (its JSON field names, not the Go ones).
func writeJSONPath(w io.Writer, tmpl string, doc any) error {
	j, err := parseJSONPath(tmpl)
	if err != nil {
		return err
	}
	raw, err := json.Marshal(doc)
	if err != nil {
		return fmt.Errorf("encode json: %w", err)
	}
	var data any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber() // integers print as integers
	if err := dec.Decode(&data); err != nil {
		return fmt.Errorf("decode json: %w", err)
	}
	if err := j.Execute(w, data); err != nil {
		return fmt.Errorf("-o jsonpath: %w", err)
	}
	return nil
}

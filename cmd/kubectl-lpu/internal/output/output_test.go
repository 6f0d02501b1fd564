package output

import (
	"bytes"
	"strings"
	"testing"

	"github.com/hyperaccel/lpu-node/cmd/kubectl-lpu/internal/view"
)

func TestWrite(t *testing.T) {
	c := view.Cluster{
		Nodes:   []view.Node{{Name: "n\x1b[31m", Mode: "device-plugin", Total: 4, Free: 4, LargestFreeArc: -1, Arcs: map[int]int{1: 4}}},
		Pods:    []view.Pod{{Namespace: "default", Name: "p", Node: "node-0", Count: 2}},
		Summary: view.Summary{Nodes: 1, Total: 4, Free: 4, Arcs: map[int]int{1: 4}},
		DRA:     view.DRA{Reason: "not served"},
	}
	tests := []struct {
		format string
		v      View
		want   string
	}{
		{"name", Nodes{c}, "node/n\\x1b[31m\n"},
		{"name", Pods{c}, "pod/p\n"},
		{"name", Pods{}, ""},
		{"json", Pods{}, "[]\n"},
		{"jsonpath={.dra.reason}", Nodes{c}, "not served"},
		{"jsonpath={[0].count}", Pods{c}, "2"},
		{"yaml", Pods{c}, "- apiVersion: lpu.hyperaccel.ai/v1alpha1\n  count: 2\n  kind: Pod\n  name: p\n  namespace: default\n  node: node-0\n"},
		{"text", Pods{c}, "default/p"},
		{"", Version{ClientVersion: "1.0.0", ServerVersion: "v1.37.2"}, "Client Version: 1.0.0\nServer Version: v1.37.2\n"},
	}
	for _, tc := range tests {
		var b bytes.Buffer
		if err := Write(&b, tc.format, tc.v); err != nil {
			t.Errorf("-o %s: %v", tc.format, err)
			continue
		}
		if got := b.String(); got != tc.want && !(tc.format == "text" && strings.Contains(got, tc.want)) {
			t.Errorf("-o %s: %q, want %q", tc.format, got, tc.want)
		}
	}
	var b bytes.Buffer
	if err := Write(&b, "json", Nodes{}); err != nil || !strings.Contains(b.String(), `"nodes": []`) {
		t.Errorf("empty NodeList: %v\n%s", err, b.String())
	}
	for _, bad := range []string{"xml", "jsonpath={.a[", "go-template={{.}}"} {
		if err := Check(bad); err == nil {
			t.Errorf("-o %s accepted", bad)
		}
	}
}

package main

import (
	"io"
	"strings"
	"testing"
)

func TestRunBadInput(t *testing.T) {
	tests := map[string]struct {
		args []string
		want string
	}{
		"no command":      {nil, "want a command"},
		"unknown command": {[]string{"arcs"}, "want a command"},
		"bad format":      {[]string{"nodes", "-o", "yaml"}, `-o "yaml"`},
		"missing config":  {[]string{"pods", "--kubeconfig", "/nonexistent/kubeconfig"}, "kubeconfig"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := run(tc.args, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("run %v: %v, want %q", tc.args, err, tc.want)
			}
		})
	}
}

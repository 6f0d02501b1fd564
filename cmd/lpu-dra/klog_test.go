package main

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"k8s.io/klog/v2"
)

// TestKlogThroughSlog: a line client-go or the DRA library logs through
// klog comes out of lpu-dra's slog handler as JSON, with its key-value
// pairs (issue 33, item 7).
func TestKlogThroughSlog(t *testing.T) {
	var buf bytes.Buffer
	routeKlog(slog.New(slog.NewJSONHandler(&buf, nil)))
	t.Cleanup(klog.ClearLogger)
	klog.InfoS("resource slice published", "pool", "node-a")
	klog.Flush()
	line := strings.TrimSpace(buf.String())
	var rec map[string]any
	if err := json.Unmarshal([]byte(line), &rec); err != nil {
		t.Fatalf("klog line is not JSON from the slog handler: %q (%v)", line, err)
	}
	if rec["msg"] != "resource slice published" || rec["pool"] != "node-a" {
		t.Errorf("record %v, want msg and pool", rec)
	}
}

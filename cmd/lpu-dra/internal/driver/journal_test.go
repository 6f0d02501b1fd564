package driver

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	checkpoint "github.com/hyperaccel/lpu-node/internal/dracheckpoint"
)

// TestStartReportsOverlappingHolds: a journal whose holds overlap (two
// driver pods writing at once) is logged as an error at start; a clean one
// is not.
func TestStartReportsOverlappingHolds(t *testing.T) {
	for name, tc := range map[string]struct {
		journal string
		want    bool
	}{
		"overlap":  {journal: "1000 3000 pod-a prepare\n2000 4000 pod-b prepare\n", want: true},
		"disjoint": {journal: "1000 2000 pod-a prepare\n2000 4000 pod-b unprepare\n"},
		"missing":  {},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.journal != "" {
				if err := os.WriteFile(filepath.Join(dir, checkpoint.JournalName), []byte(tc.journal), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			var buf bytes.Buffer
			log := slog.New(slog.NewTextHandler(&buf, nil))
			if _, err := New(newStatic(t, ring8()), Options{NodeName: node, StateDir: dir, CDIDir: t.TempDir(), Logger: log}); err != nil {
				t.Fatal(err)
			}
			if got := strings.Contains(buf.String(), "overlapping holds"); got != tc.want {
				t.Fatalf("overlap logged = %v, want %v; log:\n%s", got, tc.want, buf.String())
			}
		})
	}
}

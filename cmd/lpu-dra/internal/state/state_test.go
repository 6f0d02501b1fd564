package state

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	checkpoint "github.com/hyperaccel/lpu-node/internal/dracheckpoint"
	"github.com/hyperaccel/lpu-node/internal/health/healthtest"
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
			if _, err := New(healthtest.New(t, healthtest.Ring(4)), Options{StateDir: dir, CDIDir: t.TempDir(), Logger: log}); err != nil {
				t.Fatal(err)
			}
			if got := strings.Contains(buf.String(), "overlapping holds"); got != tc.want {
				t.Fatalf("overlap logged = %v, want %v; log:\n%s", got, tc.want, buf.String())
			}
		})
	}
}

// TestSaveFailureRemovesSpecUnderLock is F8 of the fourth round: when the
// checkpoint cannot be saved, Prepare removes the spec it wrote before it
// releases the checkpoint lock, so a surge instance that prepares the
// claim next cannot lose its fresh spec of the same name.
func TestSaveFailureRemovesSpecUnderLock(t *testing.T) {
	stateDir, cdiDir := t.TempDir(), t.TempDir()
	s, err := New(healthtest.New(t, healthtest.Ring(4)), Options{StateDir: stateDir, CDIDir: cdiDir})
	if err != nil {
		t.Fatal(err)
	}
	diskFull := errors.New("disk full")
	saveState = func(string, *checkpoint.State) error { return diskFull }
	var heldAtRemoval error
	removed := false
	specRemovedHook = func() {
		removed = true
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		l, err := checkpoint.Acquire(ctx, stateDir, "other-instance", "prepare")
		if err == nil {
			_, _ = l.Release()
			heldAtRemoval = errors.New("the checkpoint lock was free when the spec was removed")
		}
	}
	t.Cleanup(func() { saveState, specRemovedHook = checkpoint.Save, nil })
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "claim-u1", Namespace: "default", UID: "u1"}}
	_, added, err := s.Prepare(context.Background(), Request{Claim: c, Devices: []checkpoint.Device{{Request: "lpus", Pool: "node-a", Device: "ring0-start0-size4"}}})
	if !errors.Is(err, diskFull) || added {
		t.Fatalf("err = %v (added %v), want the save's error", err, added)
	}
	if !removed {
		t.Fatal("the spec of the unsaved claim was not removed")
	}
	if heldAtRemoval != nil {
		t.Fatal(heldAtRemoval)
	}
	if entries, _ := os.ReadDir(cdiDir); len(entries) != 0 {
		t.Fatalf("the spec of a claim whose checkpoint failed is still there: %v", entries)
	}
}

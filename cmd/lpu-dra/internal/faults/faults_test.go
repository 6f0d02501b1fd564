package faults

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// clock is a settable time source.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func newLog(t *testing.T) (*Log, *clock, string) {
	t.Helper()
	c := &clock{t: time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)}
	path := filepath.Join(t.TempDir(), FileName)
	l, err := Open(path, c.now)
	if err != nil {
		t.Fatal(err)
	}
	return l, c, path
}

func observe(t *testing.T, l *Log, ids ...string) bool {
	t.Helper()
	sick := map[string]bool{}
	for _, id := range ids {
		sick[id] = true
	}
	changed, err := l.Observe(sick)
	if err != nil {
		t.Fatal(err)
	}
	return changed
}

func TestTurnsToUnhealthyAreCounted(t *testing.T) {
	l, c, _ := newLog(t)
	if !observe(t, l, "lpu3") {
		t.Fatal("a first fault did not change the counts")
	}
	c.t = c.t.Add(time.Minute)
	if observe(t, l, "lpu3") {
		t.Fatal("an LPU still unhealthy was counted again")
	}
	observe(t, l) // recovers
	c.t = c.t.Add(time.Minute)
	observe(t, l, "lpu3", "lpu5")
	got := l.Counts()
	if got["lpu3"] != 2 || got["lpu5"] != 1 || len(got) != 2 {
		t.Fatalf("counts %v, want lpu3:2 lpu5:1", got)
	}
}

func TestFaultsLeaveTheWindow(t *testing.T) {
	l, c, _ := newLog(t)
	observe(t, l, "lpu1")
	first := c.t
	observe(t, l)
	c.t = c.t.Add(time.Hour)
	observe(t, l, "lpu1")
	next, ok := l.NextExpiry()
	if want := first.Add(Window).Sub(c.t); !ok || next != want {
		t.Fatalf("next expiry in %v %v, want %v", next, ok, want)
	}
	c.t = first.Add(Window)
	if got := l.Counts()["lpu1"]; got != 1 {
		t.Fatalf("at the first fault's end of window: %d faults, want 1", got)
	}
	c.t = c.t.Add(time.Hour)
	if got := l.Counts(); len(got) != 0 {
		t.Fatalf("after the window: %v, want none", got)
	}
	if _, ok := l.NextExpiry(); ok {
		t.Fatal("an empty history has an expiry")
	}
}

// A restart keeps the history, and an LPU that was sick before it is not
// counted again when it is still sick after.
func TestHistorySurvivesReopen(t *testing.T) {
	l, c, path := newLog(t)
	observe(t, l, "lpu2")
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, want 0600", st.Mode().Perm())
	}
	l2, err := Open(path, c.now)
	if err != nil {
		t.Fatal(err)
	}
	if observe(t, l2, "lpu2") {
		t.Fatal("an LPU sick across the restart was counted again")
	}
	if got := l2.Counts()["lpu2"]; got != 1 {
		t.Fatalf("reopened: %d faults, want 1", got)
	}
}

func TestFlappingIsBounded(t *testing.T) {
	l, c, _ := newLog(t)
	for range maxPerLPU + 50 {
		observe(t, l, "lpu0")
		observe(t, l)
		c.t = c.t.Add(time.Second)
	}
	if got := l.Counts()["lpu0"]; got != maxPerLPU {
		t.Fatalf("%d faults kept, want the bound %d", got, maxPerLPU)
	}
}

func TestBadFileIsNamed(t *testing.T) {
	for name, content := range map[string]string{
		"garbage": "{not json",
		"version": `{"version":2}`,
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), FileName)
			if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			l, err := Open(path, time.Now)
			if err == nil || !strings.Contains(err.Error(), path) {
				t.Fatalf("err %v, want one naming %s", err, path)
			}
			if l == nil || len(l.Counts()) != 0 {
				t.Fatal("no empty history beside the error")
			}
		})
	}
}

// A history file of any content opens, or is refused, without a panic,
// and what it held counts within the bound.
func FuzzFaultHistory(f *testing.F) {
	f.Add([]byte(`{"version":1,"sick":["lpu1"],"faults":{"lpu1":["2026-12-07T11:00:00Z"]}}`))
	f.Add([]byte(`{"version":1,"faults":{"lpu1":[]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), FileName)
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		now := func() time.Time { return time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC) }
		l, _ := Open(path, now)
		for id, n := range l.Counts() {
			if n < 1 || n > maxPerLPU {
				t.Fatalf("%s: %d faults, want 1..%d", id, n, maxPerLPU)
			}
		}
		if d, ok := l.NextExpiry(); ok && (d < 0 || d > Window) {
			t.Fatalf("next expiry in %v, want within the window", d)
		}
	})
}

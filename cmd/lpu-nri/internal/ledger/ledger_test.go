package ledger

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const (
	idA = "00112233445566778899aabbccddeeff"
	idB = "ffeeddccbbaa99887766554433221100"
)

func TestClaim(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Claim(idA, Holder{Pod: "pod-1"}); err != nil {
		t.Fatal(err)
	}
	if err := l.Claim(idA, Holder{Pod: "pod-1"}); err != nil {
		t.Errorf("same pod again (container restart): %v", err)
	}
	err = l.Claim(idA, Holder{Pod: "pod-2"})
	if !errors.Is(err, ErrOtherPod) || !strings.Contains(err.Error(), "pod UID pod-1") {
		t.Errorf("another pod: %v, want ErrOtherPod naming pod-1", err)
	}
	if err := l.Claim(idB, Holder{Pod: ""}); err == nil {
		t.Error("empty pod UID accepted")
	}
	// The record survives a restart of the daemon.
	l2, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := l2.Claim(idA, Holder{Pod: "pod-2"}); !errors.Is(err, ErrOtherPod) {
		t.Errorf("after reopen: %v, want ErrOtherPod", err)
	}
	if matches, _ := filepath.Glob(filepath.Join(dir, ".*.tmp")); len(matches) != 0 {
		t.Errorf("temp files left: %v", matches)
	}
}

func TestPrune(t *testing.T) {
	l, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l.now = func() time.Time { return now }
	for i, pod := range []string{"live", "gone"} {
		if err := l.Claim(fmt.Sprintf("%032x", i), Holder{Pod: pod}); err != nil {
			t.Fatal(err)
		}
	}
	now = now.Add(Retention / 2)
	if err := l.Prune(only(map[string]bool{"live": true})); err != nil || l.Len() != 2 {
		t.Fatalf("prune within retention: len %d, %v", l.Len(), err)
	}
	now = now.Add(Retention)
	if err := l.Prune(only(map[string]bool{"live": true})); err != nil || l.Len() != 1 {
		t.Fatalf("prune after retention: len %d, %v", l.Len(), err)
	}
	if err := l.Claim(fmt.Sprintf("%032x", 0), Holder{Pod: "other"}); !errors.Is(err, ErrOtherPod) {
		t.Errorf("the live pod's ID was pruned: %v", err)
	}
	reopened, err := Open(filepath.Dir(l.Path()))
	if err != nil || reopened.Len() != 1 {
		t.Errorf("pruned file: len %d, %v", reopened.Len(), err)
	}
}

func TestBounded(t *testing.T) {
	l, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l.now = func() time.Time { now = now.Add(time.Second); return now }
	// Fill in memory (appending every claim would take long) with IDs of
	// pods that are gone, write it out, then one claim past the cap
	// evicts the oldest.
	for i := range MaxEntries {
		l.put(fmt.Sprintf("%032x", i), entry{Pod: "gone", Seen: l.now()})
	}
	if err := l.compact(); err != nil {
		t.Fatal(err)
	}
	if err := l.Claim(idA, Holder{Pod: "p"}); err != nil {
		t.Fatal(err)
	}
	if l.Len() != MaxEntries {
		t.Errorf("len %d, want %d", l.Len(), MaxEntries)
	}
	if _, ok := l.entries[fmt.Sprintf("%032x", 0)]; ok {
		t.Error("the oldest entry was kept")
	}
	re, err := Open(filepath.Dir(l.Path()))
	if err != nil {
		t.Fatalf("a full ledger does not reopen: %v", err)
	}
	if re.Len() != MaxEntries {
		t.Errorf("reopened len %d, want %d", re.Len(), MaxEntries)
	}
	if _, ok := re.entries[fmt.Sprintf("%032x", 0)]; ok {
		t.Error("the eviction was not recorded")
	}
	fi, err := os.Stat(l.Path())
	if err != nil || fi.Size() > maxFileSize {
		t.Errorf("file: %v, %v (limit %d)", fi, err, maxFileSize)
	}
}

func TestOpenRefuses(t *testing.T) {
	for name, body := range map[string]string{
		"garbage":   "{",
		"version":   `{"version":2,"allocations":{}}`,
		"no pod":    `{"version":1,"allocations":{"` + idA + `":{"pod":""}}}`,
		"too large": strings.Repeat(" ", maxFileSize+1),
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, FileName)
			if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), path) {
				t.Errorf("Open = %v, want an error naming %s", err, path)
			}
		})
	}
}

func TestSeed(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Claim(idA, Holder{Pod: "pod-1"}); err != nil {
		t.Fatal(err)
	}
	conflicts, err := l.Seed(map[string]Holder{idA: {Pod: "pod-9"}, idB: {Pod: "pod-2"}, "ignored": {}})
	if err != nil || len(conflicts) != 1 || conflicts[0] != idA {
		t.Fatalf("Seed = %v, %v; want the conflict on %s", conflicts, err, idA)
	}
	l2, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := l2.Claim(idB, Holder{Pod: "pod-3"}); !errors.Is(err, ErrOtherPod) {
		t.Errorf("seeded ID claimed by another pod: %v", err)
	}
	if err := l2.Claim(idA, Holder{Pod: "pod-1"}); err != nil {
		t.Errorf("seeding changed the first pod: %v", err)
	}
}

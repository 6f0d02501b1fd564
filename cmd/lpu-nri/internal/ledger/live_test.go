package ledger

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestChurnKeepsLivePod is the reproduced attack: a tenant churns more
// than MaxEntries short-lived pods, each with a fresh ID, while a
// long-running pod holds its own. The long-running pod's ID must survive,
// on disk too, and still refuse another pod.
func TestChurnKeepsLivePod(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Prune(only(map[string]bool{"victim": true})); err != nil { // Synchronize: the victim runs
		t.Fatal(err)
	}
	if err := l.Claim(idA, Holder{Pod: "victim"}); err != nil {
		t.Fatal(err)
	}
	for i := range MaxEntries + 100 {
		pod := fmt.Sprintf("churn-%d", i)
		if err := l.Claim(fmt.Sprintf("%032x", i), Holder{Pod: pod}); err != nil {
			t.Fatalf("churn claim %d: %v", i, err)
		}
		l.Removed(pod, "") // RemovePodSandbox
	}
	if l.Len() != MaxEntries {
		t.Errorf("len %d, want %d", l.Len(), MaxEntries)
	}
	if err := l.Claim(idA, Holder{Pod: "attacker"}); !errors.Is(err, ErrOtherPod) {
		t.Errorf("replay of the live pod's ID after churn: err=%v, want ErrOtherPod", err)
	}
	re, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := re.Claim(idA, Holder{Pod: "attacker"}); !errors.Is(err, ErrOtherPod) {
		t.Errorf("after reopen: err=%v, want ErrOtherPod", err)
	}
	if re.Len() != MaxEntries {
		t.Errorf("reopened len %d, want %d", re.Len(), MaxEntries)
	}
}

// fill puts n IDs of pod(i) into l and writes them out, fast.
func fill(t *testing.T, l *Ledger, n int, pod func(i int) string) {
	t.Helper()
	seen := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range n {
		l.put(fmt.Sprintf("%032x", i), entry{Pod: pod(i), Seen: seen.Add(time.Duration(i) * time.Second)})
	}
	if err := l.compact(); err != nil {
		t.Fatal(err)
	}
}

// TestFullOfLivePods: at the cap with every ID a live pod's, a new ID is
// refused with ErrFull, nothing is evicted, and one pod going away frees
// exactly its slot.
func TestFullOfLivePods(t *testing.T) {
	l, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	pod := func(i int) string { return fmt.Sprintf("pod-%d", i) }
	fill(t, l, MaxEntries, pod)
	live := map[string]bool{}
	for i := range MaxEntries {
		live[pod(i)] = true
	}
	if err := l.Prune(only(live)); err != nil {
		t.Fatal(err)
	}
	err = l.Claim(idA, Holder{Pod: "newcomer"})
	if !errors.Is(err, ErrFull) || !strings.Contains(err.Error(), "running pods") {
		t.Fatalf("Claim at a full ledger = %v, want ErrFull", err)
	}
	if l.Len() != MaxEntries {
		t.Errorf("len %d after a refusal", l.Len())
	}
	if err := l.Claim(fmt.Sprintf("%032x", 7), Holder{Pod: pod(7)}); err != nil {
		t.Errorf("a known ID of its own pod: %v", err)
	}
	l.Stopped(pod(42), "")
	if err := l.Claim(idA, Holder{Pod: "newcomer"}); err != nil {
		t.Fatalf("after a pod went: %v", err)
	}
	if _, ok := l.entries[fmt.Sprintf("%032x", 42)]; ok {
		t.Error("the gone pod's ID was kept, another evicted")
	}
	for i := range MaxEntries {
		if _, ok := l.entries[fmt.Sprintf("%032x", i)]; !ok && i != 42 {
			t.Fatalf("live pod %d's ID was evicted", i)
		}
	}
}

// TestUpgrade: an allocations.json written by the previous lpu-nri (the
// whole ledger, no log) loads, and new IDs go to the log, leaving the
// snapshot alone until compaction.
func TestUpgrade(t *testing.T) {
	dir := t.TempDir()
	old := `{"version":1,"allocations":{"` + idA + `":{"pod":"pod-1","seen":"2026-01-01T00:00:00Z"}}}`
	snap := filepath.Join(dir, FileName)
	if err := os.WriteFile(snap, []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Claim(idA, Holder{Pod: "pod-2"}); !errors.Is(err, ErrOtherPod) {
		t.Errorf("old record: %v, want ErrOtherPod", err)
	}
	before, _ := os.Stat(snap)
	if err := l.Claim(idB, Holder{Pod: "pod-2"}); err != nil {
		t.Fatal(err)
	}
	after, _ := os.Stat(snap)
	if !os.SameFile(before, after) || after.ModTime() != before.ModTime() {
		t.Error("a new ID rewrote the snapshot")
	}
	if _, err := os.Stat(filepath.Join(dir, LogName)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the old log is still there after Open compacted: %v", err)
	}
	wal, err := os.ReadFile(filepath.Join(dir, WALName))
	if err != nil {
		t.Fatal(err)
	}
	if w, err := parseWAL(wal); err != nil || len(w.recs) != 1 || w.recs[0].ID != idB || w.torn {
		t.Errorf("log: %+v, %v; want one batch with %s", w, err, idB)
	}
	re, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := re.Claim(idB, Holder{Pod: "pod-3"}); !errors.Is(err, ErrOtherPod) {
		t.Errorf("logged ID after reopen: %v", err)
	}
	// Open compacted: the log is empty and the snapshot, still version 1,
	// holds both.
	if w := readWAL(t, dir); len(w.recs) != 0 {
		t.Errorf("log after reopen: %+v", w)
	}
	data, _ := os.ReadFile(snap)
	if !strings.Contains(string(data), `"version":1`) || !strings.Contains(string(data), idA) || !strings.Contains(string(data), idB) {
		t.Errorf("snapshot %s", data)
	}
}

// readWAL parses dir's log.
func readWAL(t *testing.T, dir string) walContent {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, WALName))
	if err != nil {
		t.Fatal(err)
	}
	if len(data) != walSize {
		t.Errorf("log is %d bytes, want the preallocated %d", len(data), walSize)
	}
	w, err := parseWAL(data)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// TestCompaction: the log is folded into the snapshot after compactAfter
// records.
func TestCompaction(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	l.batches = compactAfter - 2 // as if that many were appended
	gen := l.gen
	for i := range 3 {
		if err := l.Claim(fmt.Sprintf("%032x", i), Holder{Pod: "p"}); err != nil {
			t.Fatal(err)
		}
	}
	// Two batches filled the log; the third Claim compacted first and
	// went to the new log.
	if w := readWAL(t, dir); w.gen != gen+1 || len(w.recs) != 1 || w.recs[0].ID != fmt.Sprintf("%032x", 2) {
		t.Errorf("log after compaction: %+v, want generation %d with the third ID only", w, gen+1)
	}
	data, err := os.ReadFile(filepath.Join(dir, FileName))
	if err != nil || !strings.Contains(string(data), fmt.Sprintf("%032x", 1)) || !strings.Contains(string(data), fmt.Sprintf(`"wal":%d`, gen+1)) {
		t.Errorf("snapshot %s, %v", data, err)
	}
}

// TestTornLog: a crash in the middle of an append leaves a line without
// its newline; Open ignores it (its Claim never returned) and compacts.
// A bad complete line is an error naming the log.
func TestTornLog(t *testing.T) {
	good := `{"id":"` + idA + `","pod":"pod-1","seen":"2026-01-01T00:00:00Z"}` + "\n"
	tests := map[string]struct {
		log  string
		want string // error; "" opens
	}{
		"torn tail":   {log: good + `{"id":"` + idB + `","po`},
		"bad line":    {log: `{"id":""}` + "\n" + good, want: "line 1"},
		"not json":    {log: good + "garbage\n", want: "line 2"},
		"only a tear": {log: `{"id`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, LogName)
			if err := os.WriteFile(path, []byte(tc.log), 0o600); err != nil {
				t.Fatal(err)
			}
			l, err := Open(dir)
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("Open = %v, want an error naming %s, %q", err, path, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if strings.HasPrefix(tc.log, good) {
				if err := l.Claim(idA, Holder{Pod: "pod-2"}); !errors.Is(err, ErrOtherPod) {
					t.Errorf("the complete record was lost: %v", err)
				}
			}
			if l.Len() > 1 {
				t.Errorf("the torn record was applied: len %d", l.Len())
			}
			if err := l.Claim(idB, Holder{Pod: "pod-3"}); err != nil {
				t.Fatal(err)
			}
			if _, err := Open(dir); err != nil {
				t.Errorf("an append after the tear does not reopen: %v", err)
			}
		})
	}
}

// TestAppendFails: a record that cannot be made durable is not applied.
func TestAppendFails(t *testing.T) {
	l, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	l.wal.Close() // every write now fails
	if err := l.Claim(idA, Holder{Pod: "pod-1"}); !errors.Is(err, os.ErrClosed) || !strings.Contains(err.Error(), WALName) {
		t.Fatalf("Claim = %v, want the write error (file closed) naming the log", err)
	}
	if l.Len() != 0 {
		t.Errorf("an unrecorded ID was kept in memory")
	}
}

// TestStateChecks: the ledger's files and directory get the seal key's
// owner and mode checks.
func TestStateChecks(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown to another uid needs root")
	}
	tests := map[string]struct {
		breakIt func(t *testing.T, dir string)
		want    string
	}{
		"snapshot owned by 65534": {breakIt: func(t *testing.T, d string) { must(t, os.Chown(filepath.Join(d, FileName), 65534, -1)) }, want: "owned by uid 65534"},
		"log mode 0644":           {breakIt: func(t *testing.T, d string) { must(t, os.Chmod(filepath.Join(d, WALName), 0o644)) }, want: "mode 0644"},
		"stops owned by 65534":    {breakIt: func(t *testing.T, d string) { must(t, os.Chown(filepath.Join(d, StoppedName), 65534, -1)) }, want: "owned by uid 65534"},
		"snapshot hard-linked":    {breakIt: func(t *testing.T, d string) { must(t, os.Link(filepath.Join(d, FileName), filepath.Join(d, "x"))) }, want: "more than one link"},
		"dir owned by 65534":      {breakIt: func(t *testing.T, d string) { must(t, os.Chown(d, 65534, -1)) }, want: "owned by uid 65534"},
		"dir mode 0777":           {breakIt: func(t *testing.T, d string) { must(t, os.Chmod(d, 0o777)) }, want: "lets group/others write"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			l, err := Open(dir)
			must(t, err)
			must(t, l.compact()) // both files exist
			must(t, l.Claim(idA, Holder{Pod: "p", Sandbox: "s"}))
			l.Stopped("p", "s") // and the stops once closed
			must(t, l.Close())
			for _, f := range []string{FileName, WALName, StoppedName} {
				if fi, err := os.Stat(filepath.Join(dir, f)); err != nil || fi.Mode().Perm() != 0o600 {
					t.Fatalf("%s: %v, %v; want mode 0600", f, fi, err)
				}
			}
			tc.breakIt(t, dir)
			if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Open = %v, want %q", err, tc.want)
			}
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

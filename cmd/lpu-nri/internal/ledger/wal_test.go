package ledger

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

var walSeen = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

// walOf builds a log of generation 1 holding batches, then zeros.
func walOf(t testing.TB, batches ...[]record) []byte {
	t.Helper()
	data := walHeader(1)
	for _, b := range batches {
		line, err := encodeBatch(b)
		if err != nil {
			t.Fatal(err)
		}
		data = append(data, line...)
	}
	return append(data, make([]byte, 256)...)
}

func TestParseWAL(t *testing.T) {
	a := []record{{ID: idA, Pod: "pod-1", Seen: walSeen}}
	b := []record{{ID: idB, Pod: "pod-2", Seen: walSeen, Evicted: []string{idA}}, {ID: "c", Pod: "pod-3", Seen: walSeen}}
	good := walOf(t, a, b)
	lineB, _ := encodeBatch(b)
	end := bytes.IndexByte(good, 0)

	flip := bytes.Clone(good)
	flip[len(walHeader(1))+20] ^= 1 // inside batch a: the intact b after it is damage, not a tear
	tornB := bytes.Clone(good)
	copy(tornB[end-len(lineB)/2:], make([]byte, len(lineB)/2)) // b's second half never landed
	holeB := bytes.Clone(good)
	copy(holeB[end-len(lineB):], make([]byte, 16)) // b's first sector never landed, its end did

	tests := map[string]struct {
		data    []byte
		recs    int
		torn    bool
		wantErr string
	}{
		"two batches":          {data: good, recs: 3},
		"empty":                {data: walOf(t), recs: 0},
		"no zeros":             {data: good[:end], recs: 3},
		"torn last batch":      {data: tornB, recs: 1, torn: true},
		"hole in last batch":   {data: holeB, recs: 1, torn: true},
		"damage before intact": {data: flip, wantErr: "not a torn append"},
		"no header":            {data: good[len(walHeader(1)):], wantErr: "bad header"},
		"generation 0":         {data: append([]byte(walMagic+"0\n"), 0), wantErr: "bad header"},
		"garbage":              {data: []byte("{}\n"), wantErr: "bad header"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			w, err := parseWAL(tc.data)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("parseWAL = %+v, %v; want an error with %q", w, err, tc.wantErr)
				}
				return
			}
			if err != nil || len(w.recs) != tc.recs || w.torn != tc.torn || w.gen != 1 {
				t.Fatalf("parseWAL = %+v, %v; want %d records, torn %v", w, err, tc.recs, tc.torn)
			}
		})
	}
}

// FuzzParseWAL: the parser never panics; what it accepts re-encodes into
// a log that parses to the same records; an intact log is never read as
// torn, and a tear never loses the batches before it.
func FuzzParseWAL(f *testing.F) {
	a := []record{{ID: idA, Pod: "pod-1", Seen: walSeen}}
	b := []record{{ID: idB, Pod: "pod-2", Seen: walSeen, Evicted: []string{idA}}}
	good := walOf(f, a, b)
	f.Add(good, 0)
	f.Add(good, len(good)/2)
	f.Add(good[:bytes.IndexByte(good, 0)-3], 0)
	f.Add([]byte(walMagic+"7\n"), 0)
	f.Add([]byte("lpu-nri allocation wal v1 gen 1\n00000000 []\n"), 0)
	f.Fuzz(func(t *testing.T, data []byte, cut int) {
		w, err := parseWAL(data)
		if err != nil {
			return
		}
		if w.end > len(data) || (w.torn && w.end == len(data)) {
			t.Fatalf("end %d of %d, torn %v", w.end, len(data), w.torn)
		}
		re := walHeader(w.gen)
		if len(w.recs) > 0 {
			line, err := encodeBatch(w.recs)
			if err != nil {
				t.Fatal(err)
			}
			re = append(re, line...)
		}
		w2, err := parseWAL(re)
		if err != nil || w2.torn || !sameRecords(w.recs, w2.recs) {
			t.Fatalf("re-encoded: %+v, %v; want %+v", w2, err, w.recs)
		}
		// Cutting the accepted log short after its header (a crash
		// mid-write of its last part) keeps what came before the cut.
		if cut < 0 || len(w.recs) == 0 {
			return
		}
		hdr := len(walHeader(w.gen))
		at := hdr + cut%(len(re)-hdr+1)
		w3, err := parseWAL(re[:at])
		if err != nil || len(w3.recs) > len(w.recs) || !sameRecords(w3.recs, w.recs[:len(w3.recs)]) {
			t.Fatalf("cut at %d: %+v, %v", at, w3, err)
		}
	})
}

func sameRecords(a, b []record) bool {
	return slices.EqualFunc(a, b, func(x, y record) bool {
		return x.ID == y.ID && x.Pod == y.Pod && x.Seen.Equal(y.Seen) && slices.Equal(x.Evicted, y.Evicted)
	})
}

// TestLoadsTodaysFormat: testdata/v1 is a ledger the previous lpu-nri
// wrote (allocations.json and allocations.log, two IDs in each). It
// loads; every ID in it refuses another pod; Open moves it to the new
// layout (the snapshot, still version 1, names the log's generation) and
// removes the old log.
func TestLoadsTodaysFormat(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{FileName, LogName} {
		data, err := os.ReadFile(filepath.Join("testdata", "v1", name))
		must(t, err)
		must(t, os.WriteFile(filepath.Join(dir, name), data, 0o600)) // git keeps no 0600
	}
	l, err := Open(dir)
	must(t, err)
	ids := map[string]string{
		"0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a": "pod-snap-1", "0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b": "pod-snap-2",
		"0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c": "pod-log-1", "0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d0d": "pod-log-2",
	}
	if l.Len() != len(ids) {
		t.Errorf("len %d, want %d", l.Len(), len(ids))
	}
	for id, pod := range ids {
		if err := l.Claim(id, Holder{Pod: "other"}); !errors.Is(err, ErrOtherPod) || !strings.Contains(err.Error(), pod) {
			t.Errorf("%s: %v, want ErrOtherPod naming %s", id, err, pod)
		}
	}
	must(t, l.Close())
	if _, err := os.Stat(filepath.Join(dir, LogName)); !os.IsNotExist(err) {
		t.Errorf("old log still there: %v", err)
	}
	snap, err := os.ReadFile(filepath.Join(dir, FileName))
	must(t, err)
	if !bytes.Contains(snap, []byte(`"version":1`)) || !bytes.Contains(snap, []byte(`"wal":1`)) {
		t.Errorf("snapshot %s", snap)
	}
	if w := readWAL(t, dir); w.gen != 1 {
		t.Errorf("log generation %d, want 1", w.gen)
	}
}

// TestWALGeneration: a log older than the snapshot (a crash after the
// compaction wrote the snapshot) is ignored; a newer one is an error
// naming both files.
func TestWALGeneration(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir)
	must(t, err)
	must(t, l.Claim(idA, Holder{Pod: "pod-1"}))
	must(t, l.Close())
	wal := filepath.Join(dir, WALName)
	stale, err := os.ReadFile(wal)
	must(t, err)
	l, err = Open(dir) // compacts: generation 2
	must(t, err)
	must(t, l.Close())
	must(t, os.WriteFile(wal, stale, 0o600)) // as if the rename never happened
	l, err = Open(dir)
	must(t, err)
	if err := l.Claim(idA, Holder{Pod: "pod-2"}); !errors.Is(err, ErrOtherPod) {
		t.Errorf("after a stale log: %v", err)
	}
	must(t, l.Close())
	newer := append([]byte(walMagic+"99\n"), make([]byte, 64)...)
	must(t, os.WriteFile(wal, newer, 0o600))
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "old copy") || !strings.Contains(err.Error(), FileName) {
		t.Errorf("Open with a newer log = %v", err)
	}
}

// TestSeedLargerThanLog: a batch that cannot fit in the log (a Seed of
// more running containers than any node has) is made durable by a
// compaction instead, and does not make Seed compact forever.
func TestSeedLargerThanLog(t *testing.T) {
	l, err := Open(t.TempDir())
	must(t, err)
	running := map[string]Holder{}
	for i := range walSize / 64 { // ~90 bytes of JSON each: more than the log holds
		running[strings.Repeat("a", 24)+strconv.Itoa(100000+i)] = Holder{Pod: "pod-" + strconv.Itoa(i%50)}
	}
	done := make(chan error, 1)
	go func() { _, err := l.Seed(running); done <- err }()
	select {
	case err := <-done:
		must(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("Seed of a batch larger than the log does not return")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.entries) != len(running) || l.synced != l.seq || l.batches != 0 {
		t.Errorf("len %d (want %d), synced %d of %d, %d batches in the log; want all durable through the snapshot",
			len(l.entries), len(running), l.synced, l.seq, l.batches)
	}
}

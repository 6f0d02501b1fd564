package dracheckpoint

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Two holders (separate opens, as two processes) doing a read-modify-write
// of one file under the lock never lose an update, and the journal shows
// no two holds at once.
func TestLockExcludes(t *testing.T) {
	dir := t.TempDir()
	counter := filepath.Join(dir, "counter")
	if err := os.WriteFile(counter, []byte("0"), 0o600); err != nil {
		t.Fatal(err)
	}
	const holders, rounds = 2, 50
	var wg sync.WaitGroup
	errs := make(chan error, holders*rounds)
	for h := 0; h < holders; h++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				errs <- increment(dir, counter, fmt.Sprintf("pod-%d", h))
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	data, _ := os.ReadFile(counter)
	if string(data) != strconv.Itoa(holders*rounds) {
		t.Fatalf("counter %s after %d locked increments: an update was lost", data, holders*rounds)
	}
	journal, err := os.ReadFile(filepath.Join(dir, JournalName))
	if err != nil {
		t.Fatal(err)
	}
	recs, err := ParseJournal(journal)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != holders*rounds {
		t.Fatalf("journal has %d records, want %d", len(recs), holders*rounds)
	}
	if a, b, ok := Overlap(recs); ok {
		t.Fatalf("holds overlap: %v and %v", a, b)
	}
	seen := map[string]int{}
	for _, r := range recs {
		seen[r.Holder+"/"+r.Op]++
	}
	if seen["pod-0/inc"] != rounds || seen["pod-1/inc"] != rounds {
		t.Fatalf("journal holders %v", seen)
	}
}

func increment(dir, counter, holder string) error {
	l, err := Acquire(context.Background(), dir, holder, "inc")
	if err != nil {
		return err
	}
	data, err := os.ReadFile(counter)
	if err == nil {
		n, _ := strconv.Atoi(string(data))
		time.Sleep(50 * time.Microsecond) // widen the race an unlocked writer would lose
		err = os.WriteFile(counter, []byte(strconv.Itoa(n+1)), 0o600)
	}
	if _, rerr := l.Release(); err == nil {
		err = rerr
	}
	return err
}

// A held lock makes Acquire wait; its context ends the wait with an error.
func TestLockWaitsAndCancels(t *testing.T) {
	dir := t.TempDir()
	l, err := Acquire(context.Background(), dir, "old", "prepare")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := Acquire(ctx, dir, "new", "prepare"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire while held = %v, want the deadline", err)
	}
	go func() {
		time.Sleep(30 * time.Millisecond)
		if _, err := l.Release(); err != nil {
			t.Error(err)
		}
	}()
	l2, err := Acquire(context.Background(), dir, "new", "prepare")
	if err != nil {
		t.Fatal(err)
	}
	if l2.Waited() < 20*time.Millisecond {
		t.Errorf("waited %v for a lock held 30 ms", l2.Waited())
	}
	rec, err := l2.Release()
	if err != nil || rec.Holder != "new" || rec.Released.Before(rec.Acquired) || !rec.Acquired.Equal(l2.Acquired()) {
		t.Fatalf("release = %+v, %v", rec, err)
	}
}

// The lock file gets the state file checks: a lock others could replace,
// in a directory others can write, is refused.
func TestLockRefusesUnsafeDir(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := Acquire(context.Background(), dir, "x", "prepare"); err == nil || !strings.Contains(err.Error(), "group/others") {
		t.Fatalf("Acquire in a world-writable dir = %v", err)
	}
	dir = t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, LockName), nil, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(dir, LockName), 0o666); err != nil {
		t.Fatal(err)
	}
	if _, err := Acquire(context.Background(), dir, "x", "prepare"); err == nil {
		t.Fatal("Acquire accepted a lock file others can write")
	}
}

func TestJournalRotates(t *testing.T) {
	dir := t.TempDir()
	big := strings.Repeat("1 2 a b\n", journalMax/8+1)
	if err := os.WriteFile(filepath.Join(dir, JournalName), []byte(big), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := Acquire(context.Background(), dir, "x", "prepare")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Release(); err != nil {
		t.Fatal(err)
	}
	cur, _ := os.ReadFile(filepath.Join(dir, JournalName))
	old, _ := os.ReadFile(filepath.Join(dir, JournalName+".1"))
	if recs, err := ParseJournal(cur); err != nil || len(recs) != 1 || len(old) != len(big) {
		t.Fatalf("after rotation: current %d records (%v), previous %d bytes", len(recs), err, len(old))
	}
}

func TestOverlap(t *testing.T) {
	at := func(s, e int64) Record {
		return Record{Holder: "h", Op: "o", Acquired: time.UnixMicro(s), Released: time.UnixMicro(e)}
	}
	for _, tc := range []struct {
		recs []Record
		want bool
	}{
		{nil, false},
		{[]Record{at(0, 10), at(10, 20), at(30, 40)}, false},
		{[]Record{at(30, 40), at(0, 10), at(10, 20)}, false},
		{[]Record{at(0, 10), at(5, 20)}, true},
		{[]Record{at(0, 100), at(10, 20), at(30, 40)}, true}, // nested in a long hold, not in the previous
	} {
		if _, _, got := Overlap(tc.recs); got != tc.want {
			t.Errorf("Overlap(%v) = %v, want %v", tc.recs, got, tc.want)
		}
	}
}

func TestParseJournalErrors(t *testing.T) {
	for _, in := range []string{"1 2 a", "1 2 a b c", "x 2 a b", "5 4 a b", "1 y a b"} {
		if _, err := ParseJournal([]byte(in + "\n")); err == nil {
			t.Errorf("ParseJournal(%q) accepted", in)
		}
	}
}

// Every line ParseJournal accepts prints back to the same record.
func FuzzParseJournal(f *testing.F) {
	f.Add([]byte("1764640000000000 1764640000000100 5d2c9a40 prepare\n"))
	f.Add([]byte("\n\n1 2 a b\n3 4 c d"))
	f.Add([]byte("-1 0 a b"))
	f.Fuzz(func(t *testing.T, data []byte) {
		recs, err := ParseJournal(data)
		if err != nil {
			return
		}
		var b strings.Builder
		for _, r := range recs {
			if r.Released.Before(r.Acquired) {
				t.Fatalf("record released before acquired: %v", r)
			}
			b.WriteString(r.String() + "\n")
		}
		again, err := ParseJournal([]byte(b.String()))
		if err != nil || len(again) != len(recs) {
			t.Fatalf("re-parse of %q: %v, %d records, want %d", b.String(), err, len(again), len(recs))
		}
		for i := range recs {
			if again[i] != recs[i] {
				t.Fatalf("record %d: %v, re-parsed %v", i, recs[i], again[i])
			}
		}
	})
}

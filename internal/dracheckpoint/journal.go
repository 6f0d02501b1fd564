package dracheckpoint

import (
	"bufio"
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Record is one hold of the lock: who held it, for what, from when to when.
// A line of the journal is "<acquired µs> <released µs> <holder> <op>",
// times in Unix microseconds (exact in awk's doubles, which a shell test
// reads them with).
type Record struct {
	Holder   string
	Op       string
	Acquired time.Time
	Released time.Time
}

// String is the record's journal line, without the newline.
func (r Record) String() string {
	return fmt.Sprintf("%d %d %s %s", r.Acquired.UnixMicro(), r.Released.UnixMicro(), field(r.Holder), field(r.Op))
}

// field keeps a journal field one word: "-" for empty, spaces replaced.
func field(s string) string {
	if s == "" {
		return "-"
	}
	return strings.Join(strings.Fields(s), "_")
}

// ParseJournal decodes journal lines; a malformed line is an error naming it.
func ParseJournal(data []byte) ([]Record, error) {
	var out []Record
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if len(f) != 4 {
			return nil, fmt.Errorf("lock journal line %d: %d fields, want 4", n, len(f))
		}
		a, err1 := strconv.ParseInt(f[0], 10, 64)
		r, err2 := strconv.ParseInt(f[1], 10, 64)
		if err1 != nil || err2 != nil || r < a {
			return nil, fmt.Errorf("lock journal line %d: bad times %q %q", n, f[0], f[1])
		}
		out = append(out, Record{Acquired: time.UnixMicro(a), Released: time.UnixMicro(r), Holder: f[2], Op: f[3]})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("lock journal: %w", err)
	}
	return out, nil
}

// Overlap returns the first two records whose holds overlap in time, and
// false when none do: the lock held twice at once.
func Overlap(recs []Record) (Record, Record, bool) {
	s := slices.Clone(recs)
	slices.SortFunc(s, func(a, b Record) int { return a.Acquired.Compare(b.Acquired) })
	last := 0 // the record released last so far
	for i := 1; i < len(s); i++ {
		if s[i].Acquired.Before(s[last].Released) {
			return s[last], s[i], true
		}
		if s[i].Released.After(s[last].Released) {
			last = i
		}
	}
	return Record{}, Record{}, false
}

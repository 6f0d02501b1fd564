package cordon

import (
	"cmp"
	"slices"
	"strings"
	"testing"
)

// Parse sorts by number, drops duplicates and tolerates spaces; a bad
// entry is named, the good ones still returned (what the Watcher adds).
func TestParse(t *testing.T) {
	for _, tc := range []struct {
		value string
		want  []string
		bad   string // a substring of the error, "" for none
	}{
		{"", nil, ""},
		{"  ", nil, ""},
		{"lpu3", []string{"lpu3"}, ""},
		{"lpu10,lpu2,lpu2, lpu0 ", []string{"lpu0", "lpu2", "lpu10"}, ""},
		{"lpu3,gpu1,lpu1", []string{"lpu1", "lpu3"}, `"gpu1"`},
		{"lpu3,,lpu1", []string{"lpu1", "lpu3"}, `entry ""`},
		{"lpu01", nil, `"lpu01"`},
		{"lpu65536", nil, `"lpu65536"`},
		{"lpu-1,lpu1", []string{"lpu1"}, `"lpu-1"`},
	} {
		got, err := Parse(tc.value)
		if !slices.Equal(got, tc.want) {
			t.Errorf("Parse(%q) = %v, want %v", tc.value, got, tc.want)
		}
		switch {
		case tc.bad == "" && err != nil:
			t.Errorf("Parse(%q): %v", tc.value, err)
		case tc.bad != "" && (err == nil || !strings.Contains(err.Error(), tc.bad)):
			t.Errorf("Parse(%q) error %v, want one naming %s", tc.value, err, tc.bad)
		}
	}
	if _, err := Parse(strings.Repeat("lpu1,", maxValue)); err == nil {
		t.Error("a value over the size bound parsed")
	}
}

func TestFormat(t *testing.T) {
	got, err := Format([]string{"lpu7", "lpu10", "lpu7", "lpu1"})
	if err != nil || got != "lpu1,lpu7,lpu10" {
		t.Fatalf("Format = %q, %v; want lpu1,lpu7,lpu10", got, err)
	}
	if got, err := Format(nil); err != nil || got != "" {
		t.Fatalf("Format(nil) = %q, %v", got, err)
	}
	if _, err := Format([]string{"lpu1", "lpu 2"}); err == nil || !strings.Contains(err.Error(), `"lpu 2"`) {
		t.Fatalf("Format of a bad ID: %v, want an error naming it", err)
	}
}

// Whatever the value, Parse never panics; when it succeeds, Format of its
// IDs parses back to the same IDs and is a fixed point of Format∘Parse.
func FuzzCordonAnnotation(f *testing.F) {
	for _, s := range []string{"", "lpu0", "lpu3,lpu1", "lpu1,,", " lpu2 ,lpu2", "lpu01", "lpu65535,lpu65536", "gpu0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, value string) {
		ids, err := Parse(value)
		// lpuN forms without leading zeros sort by number as (length, text).
		if !slices.IsSortedFunc(ids, func(a, b string) int { return cmp.Or(cmp.Compare(len(a), len(b)), strings.Compare(a, b)) }) {
			t.Fatalf("Parse(%q) = %v, not sorted by number", value, ids)
		}
		if len(slices.Compact(slices.Clone(ids))) != len(ids) {
			t.Fatalf("Parse(%q) = %v, duplicates", value, ids)
		}
		out, ferr := Format(ids)
		if ferr != nil {
			t.Fatalf("Format(Parse(%q) = %v): %v", value, ids, ferr)
		}
		again, perr := Parse(out)
		if perr != nil || !slices.Equal(again, ids) {
			t.Fatalf("Parse(Format(%v)) = %v, %v", ids, again, perr)
		}
		if err == nil && len(ids) == 0 && strings.TrimSpace(value) != "" {
			t.Fatalf("Parse(%q): no IDs and no error", value)
		}
	})
}

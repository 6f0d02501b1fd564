package svgchart

import (
	"encoding/xml"
	"errors"
	"io"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// parsed is what the tests read back from a written chart.
type parsed struct {
	texts  []string // every <text>'s content, in order
	titles []string // every bar's <title>
	bars   []rect   // every rect.bar, in order
}

type rect struct {
	x, y, w, h float64
	fill       string
}

// parse decodes svg with encoding/xml, token by token, so any mark-up
// error (an unescaped "<" or "&", an unclosed element) fails the test.
func parse(t *testing.T, svg string) parsed {
	t.Helper()
	var p parsed
	d := xml.NewDecoder(strings.NewReader(svg))
	var inText, inTitle bool
	root := true
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("the SVG is not well-formed XML: %v\n%s", err, svg)
		}
		switch e := tok.(type) {
		case xml.StartElement:
			if root {
				if e.Name.Space != "http://www.w3.org/2000/svg" || e.Name.Local != "svg" {
					t.Fatalf("root element %v, want svg in the SVG namespace", e.Name)
				}
				root = false
			}
			switch e.Name.Local {
			case "text":
				inText = true
				p.texts = append(p.texts, "")
			case "title":
				inTitle = true
				p.titles = append(p.titles, "")
			case "rect":
				if a := attrs(e); a["class"] == "bar" {
					p.bars = append(p.bars, rect{f(t, a["x"]), f(t, a["y"]), f(t, a["width"]), f(t, a["height"]), a["fill"]})
				}
			}
		case xml.EndElement:
			inText, inTitle = inText && e.Name.Local != "text", inTitle && e.Name.Local != "title"
		case xml.CharData:
			if inText {
				p.texts[len(p.texts)-1] += string(e)
			}
			if inTitle {
				p.titles[len(p.titles)-1] += string(e)
			}
		}
	}
	return p
}

func attrs(e xml.StartElement) map[string]string {
	m := map[string]string{}
	for _, a := range e.Attr {
		m[a.Name.Local] = a.Value
	}
	return m
}

func f(t *testing.T, s string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatalf("coordinate %q: %v", s, err)
	}
	return v
}

func write(t *testing.T, c Chart) string {
	t.Helper()
	var b strings.Builder
	if err := c.Write(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// The written chart is well-formed XML that carries every title, legend
// label, group label, tick and value as text, and every bar with its
// colour and its name in the same order; text that needs escaping
// (<&> in a title, a label, a legend key and a bar's name) survives the
// round trip unchanged.
func TestWriteCarriesLabels(t *testing.T) {
	c := Chart{
		Title:    `contiguous <starts> & "waits"`,
		Subtitle: "seed 1, load 0.90",
		Legend:   []Key{{"count-bound", "#969696"}, {"pkg/alloc <&>", "#2166ac"}},
		Panels: []Panel{
			{Title: "node 1x8", Lo: 0, Hi: 100, Tick: 25, Digits: 1, Groups: []Group{
				{Label: "default", Bars: []Bar{{"count-bound", 90, "#969696"}, {"pkg/alloc <&>", 87.26, "#2166ac"}}},
				{Label: "all-small & large", Bars: []Bar{{"count-bound", 80, "#969696"}, {"pkg/alloc <&>", 79.5, "#2166ac"}}},
			}},
			{Heading: "as a share of the bound (%)", Title: "node 2x8", Lo: 90, Hi: 100, Tick: 2, Digits: 2, Groups: []Group{
				{Label: "default", Bars: []Bar{{"count-bound", 100, "#969696"}, {"pkg/alloc <&>", 96.94, "#2166ac"}}},
			}},
		},
	}
	p := parse(t, write(t, c))
	for _, want := range []string{c.Title, c.Subtitle, "count-bound", "pkg/alloc <&>", "node 1x8", "node 2x8",
		"as a share of the bound (%)", "default", "all-small & large", "0", "25", "100", "90", "92", "87.3", "79.5", "96.94", "100.00"} {
		if !slices.Contains(p.texts, want) {
			t.Errorf("no <text> %q in %q", want, p.texts)
		}
	}
	wantTitles := []string{"count-bound: 90.0", "pkg/alloc <&>: 87.3", "count-bound: 80.0", "pkg/alloc <&>: 79.5", "count-bound: 100.00", "pkg/alloc <&>: 96.94"}
	if !slices.Equal(p.titles, wantTitles) {
		t.Errorf("bar titles %q, want %q", p.titles, wantTitles)
	}
	if len(p.bars) != len(wantTitles) {
		t.Fatalf("%d bars, want %d", len(p.bars), len(wantTitles))
	}
	for i, r := range p.bars {
		if want := []string{"#969696", "#2166ac"}[i%2]; r.fill != want {
			t.Errorf("bar %d: fill %q, want %q", i, r.fill, want)
		}
		if i > 0 && r.x <= p.bars[i-1].x && i != 4 { // bar 4 starts the second panel
			t.Errorf("bar %d at x %v, not right of bar %d at %v", i, r.x, i-1, p.bars[i-1].x)
		}
	}
}

// Values map to bar heights monotonically on the panel's axis: a larger
// value is a taller bar with its top higher up, every bar stands on the
// same base, the height is proportional to value-Lo, and values outside
// the axis are clamped (a stub below Lo, the full height above Hi).
func TestValuesMapMonotonically(t *testing.T) {
	values := []float64{-5, 90, 91, 92.5, 95, 99.99, 100, 130}
	var bars []Bar
	for _, v := range values {
		bars = append(bars, Bar{Name: "v", Value: v, Color: "#000000"})
	}
	p := parse(t, write(t, Chart{Title: "t", Panels: []Panel{{Lo: 90, Hi: 100, Tick: 5, Digits: 2, Groups: []Group{{Label: "g", Bars: bars}}}}}))
	if len(p.bars) != len(values) {
		t.Fatalf("%d bars, want %d", len(p.bars), len(values))
	}
	base := p.bars[0].y + p.bars[0].h
	for i, r := range p.bars {
		if got := r.y + r.h; got < base-0.11 || got > base+0.11 {
			t.Errorf("bar %d (value %v) ends at y %v, want the base %v", i, values[i], got, base)
		}
		clamped := min(max(values[i], 90), 100)
		if want := (clamped - 90) / 10 * plotH; clamped > 90 && (r.h < want-0.11 || r.h > want+0.11) {
			t.Errorf("bar %d (value %v): height %v, want %v", i, values[i], r.h, want)
		}
		if i == 0 {
			continue
		}
		prev := p.bars[i-1]
		switch {
		case values[i-1] >= 100 || values[i] <= 90: // both clamped to the same end
			if r.h != prev.h {
				t.Errorf("bars %d and %d (values %v, %v) differ though both are clamped: %v vs %v", i-1, i, values[i-1], values[i], prev.h, r.h)
			}
		case r.h <= prev.h || r.y >= prev.y:
			t.Errorf("value %v → height %v (top %v) is not taller than value %v → %v (top %v)", values[i], r.h, r.y, values[i-1], prev.h, prev.y)
		}
	}
	if p.bars[0].h != stub {
		t.Errorf("a value under the axis is drawn %v high, want a %v stub", p.bars[0].h, stub)
	}
	if !slices.Contains(p.texts, "-5.00") || !slices.Contains(p.texts, "130.00") {
		t.Errorf("clamped bars lost their true values: %q", p.texts)
	}
}

// A group label breaks at "\n" and wraps after "-" or a space where the
// line would run past the group; a word that is too wide stays whole.
func TestWrap(t *testing.T) {
	const w = 100.0 // 13 characters of 7.2 at size 12
	for _, c := range []struct {
		label string
		want  []string
	}{
		{"", nil},
		{"dra-dynamic", []string{"dra-dynamic"}},
		{"dp-least\npkg/alloc", []string{"dp-least", "pkg/alloc"}},
		{"dra-best-effort-prefilter", []string{"dra-best-", "effort-", "prefilter"}},
		{"gang-on\n144 deadlocks held", []string{"gang-on", "144 deadlocks", "held"}},
		{"averylongnamewithouthyphens", []string{"averylongnamewithouthyphens"}},
	} {
		got := wrap(c.label, w, 12)
		if !slices.Equal(got, c.want) {
			t.Errorf("wrap(%q) = %q, want %q", c.label, got, c.want)
		}
		for _, l := range got {
			if textWidth(l, 12) > w && strings.ContainsAny(l, "- ") {
				t.Errorf("wrap(%q): line %q is %v wide, over %v", c.label, l, textWidth(l, 12), w)
			}
		}
	}
}

package prom

import (
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"testing"
)

// svgSeries is one line of an svgChart, in data units: x in seconds since
// the start, y the value.
type svgSeries struct {
	Label  string
	Color  string // an SVG colour, e.g. #1a9850
	Points [][2]float64
}

// svgChart is a step-line chart written as SVG with the standard library.
// Text is SVG <text> set in the viewer's sans-serif font, so there is no
// font code to keep.
type svgChart struct {
	Title  string
	XLabel string
	XMax   float64 // seconds at the right edge
	YMax   float64 // value at the top; larger values are drawn at the top
	YTick  float64
	Series []svgSeries
}

// The chart's geometry in SVG user units; svgY0 is the bottom of the plot.
const (
	svgW, svgH             = 720, 380
	svgX0, svgX1           = 60.0, 700.0
	svgY0, svgY1           = 300.0, 60.0
	svgInk, svgFont        = "#282828", "sans-serif"
	svgLegendStep, svgDotR = 210.0, 2.0
)

// svgX maps seconds to the plot's x.
func (c svgChart) svgX(x float64) float64 {
	if c.XMax <= 0 {
		return svgX0
	}
	return svgX0 + math.Min(math.Max(x, 0), c.XMax)/c.XMax*(svgX1-svgX0)
}

// svgY maps a value to the plot's y.
func (c svgChart) svgY(y float64) float64 {
	if c.YMax <= 0 {
		return svgY0
	}
	return svgY0 - math.Min(math.Max(y, 0), c.YMax)/c.YMax*(svgY0-svgY1)
}

// num formats a coordinate: one decimal is finer than a pixel.
func num(f float64) string { return strconv.FormatFloat(f, 'f', 1, 64) }

// svgText returns a <text> element with s escaped.
func svgText(x, y float64, size int, anchor, s string) string {
	var esc strings.Builder
	_ = xml.EscapeText(&esc, []byte(s)) // a strings.Builder does not fail
	return fmt.Sprintf(`<text x="%s" y="%s" font-family="%s" font-size="%d" fill="%s" text-anchor="%s">%s</text>`+"\n",
		num(x), num(y), svgFont, size, svgInk, anchor, esc.String())
}

// write writes the chart as a standalone SVG document.
func (c svgChart) write(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, `<?xml version="1.0" encoding="UTF-8"?>`+"\n")
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d">`+"\n", svgW, svgH, svgW, svgH)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", svgW, svgH)
	b.WriteString(svgText(svgX0, 32, 18, "start", c.Title))
	// Axes, y ticks with their values and light grid lines.
	fmt.Fprintf(&b, `<path d="M%s %sV%sH%s" fill="none" stroke="%s" stroke-width="1.5"/>`+"\n",
		num(svgX0), num(svgY1), num(svgY0), num(svgX1), svgInk)
	if c.YTick > 0 {
		for v := 0.0; v <= c.YMax+1e-9; v += c.YTick {
			y := c.svgY(v)
			fmt.Fprintf(&b, `<path d="M%s %sH%s" stroke="#dddddd" stroke-width="1"/>`+"\n", num(svgX0+1), num(y), num(svgX1))
			fmt.Fprintf(&b, `<path d="M%s %sH%s" stroke="%s" stroke-width="1.5"/>`+"\n", num(svgX0-5), num(y), num(svgX0), svgInk)
			b.WriteString(svgText(svgX0-9, y+4, 12, "end", strconv.FormatFloat(v, 'f', -1, 64)))
		}
	}
	b.WriteString(svgText(svgX0, svgY0+18, 12, "start", "0 s"))
	b.WriteString(svgText(svgX1, svgY0+18, 12, "end", fmt.Sprintf("%.0f s", c.XMax)))
	b.WriteString(svgText((svgX0+svgX1)/2, svgY0+18, 12, "middle", c.XLabel))
	for i, s := range c.Series {
		fmt.Fprintf(&b, `<g class="series" fill="%s" stroke="%s">`+"\n", s.Color, s.Color)
		var d strings.Builder
		for j, p := range s.Points { // a step line: hold the value until the next sample
			x, y := c.svgX(p[0]), c.svgY(p[1])
			if j == 0 {
				fmt.Fprintf(&d, "M%s %s", num(x), num(y))
			} else {
				fmt.Fprintf(&d, "H%sV%s", num(x), num(y))
			}
		}
		if d.Len() > 0 {
			fmt.Fprintf(&b, `<path d="%s" fill="none" stroke-width="2"/>`+"\n", d.String())
		}
		for _, p := range s.Points {
			fmt.Fprintf(&b, `<circle cx="%s" cy="%s" r="%s" stroke="none"/>`+"\n", num(c.svgX(p[0])), num(c.svgY(p[1])), num(svgDotR))
		}
		lx := svgX0 + 10 + float64(i)*svgLegendStep
		fmt.Fprintf(&b, `<rect x="%s" y="%s" width="14" height="14" stroke="none"/>`+"\n", num(lx), num(svgY0+40))
		b.WriteString("</g>\n")
		b.WriteString(svgText(lx+20, svgY0+52, 13, "start", s.Label))
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// svgDoc is the part of the written SVG that TestSVGChart reads back.
type svgDoc struct {
	XMLName xml.Name `xml:"http://www.w3.org/2000/svg svg"`
	Texts   []string `xml:"text"`
	Groups  []struct {
		Fill  string `xml:"fill,attr"`
		Paths []struct {
			D string `xml:"d,attr"`
		} `xml:"path"`
		Circles []struct {
			CX float64 `xml:"cx,attr"`
			CY float64 `xml:"cy,attr"`
		} `xml:"circle"`
	} `xml:"g"`
}

// TestSVGChart: the writer's output is well-formed XML (decoded with
// encoding/xml, including a title that needs escaping), each series is a
// group in its colour with one dot per point at the mapped position, a
// value over YMax is drawn at the top, and the text is there as <text>.
func TestSVGChart(t *testing.T) {
	c := svgChart{
		Title:  `healthy & allocated <LPUs>`,
		XLabel: "seconds since the start",
		XMax:   100, YMax: 10, YTick: 2,
		Series: []svgSeries{
			{Label: "healthy LPUs", Color: "#1a9850", Points: [][2]float64{{0, 8}, {50, 7}, {100, 7}}},
			{Label: "allocate calls", Color: "#d73027", Points: [][2]float64{{0, 0}, {25, 4}, {75, 12}}},
		},
	}
	var b strings.Builder
	if err := c.write(&b); err != nil {
		t.Fatal(err)
	}
	var doc svgDoc
	if err := xml.Unmarshal([]byte(b.String()), &doc); err != nil {
		t.Fatalf("the SVG is not well-formed XML: %v\n%s", err, b.String())
	}
	if len(doc.Groups) != len(c.Series) {
		t.Fatalf("%d series groups, want %d", len(doc.Groups), len(c.Series))
	}
	for i, s := range c.Series {
		g := doc.Groups[i]
		if g.Fill != s.Color {
			t.Errorf("series %q: fill %q, want %q", s.Label, g.Fill, s.Color)
		}
		if len(g.Paths) != 1 || strings.Count(g.Paths[0].D, "V") != len(s.Points)-1 {
			t.Errorf("series %q: paths %v, want one step line through %d points", s.Label, g.Paths, len(s.Points))
		}
		if len(g.Circles) != len(s.Points) {
			t.Fatalf("series %q: %d dots, want %d", s.Label, len(g.Circles), len(s.Points))
		}
		for j, p := range s.Points {
			wantX := svgX0 + p[0]/c.XMax*(svgX1-svgX0)
			wantY := svgY0 - math.Min(p[1], c.YMax)/c.YMax*(svgY0-svgY1)
			if got := g.Circles[j]; math.Abs(got.CX-wantX) > 0.1 || math.Abs(got.CY-wantY) > 0.1 {
				t.Errorf("series %q point %v: dot at (%v, %v), want (%v, %v)", s.Label, p, got.CX, got.CY, wantX, wantY)
			}
		}
	}
	texts := strings.Join(doc.Texts, "|")
	for _, want := range []string{c.Title, c.XLabel, "healthy LPUs", "allocate calls", "0 s", "100 s", "10"} {
		if !strings.Contains(texts, want) {
			t.Errorf("no <text> %q in %q", want, texts)
		}
	}
}

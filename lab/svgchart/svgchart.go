package svgchart

import (
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// Chart is a figure: a title, a subtitle and a legend over panels stacked
// top to bottom.
type Chart struct {
	Title, Subtitle string
	Legend          []Key
	Panels          []Panel
}

// Key is one legend entry: a colour swatch and its label.
type Key struct{ Label, Color string }

// Panel is one bar plot on a y axis from Lo to Hi with grid lines every
// Tick. A value below Lo is drawn as a stub at the axis, one above Hi at
// the top; the label over each bar gives the value with Digits decimals.
type Panel struct {
	Heading      string // larger text above the panel that opens a section; "" for none
	Title        string
	Lo, Hi, Tick float64
	Digits       int
	Groups       []Group
}

// Group is bars side by side with a label under them. "\n" in Label
// starts a line; a line wider than the group wraps after a "-" or a space.
type Group struct {
	Label string
	Bars  []Bar
}

// Bar is one value. Name (a series or an arm) goes with the value into
// the bar's <title>; Color is an SVG colour such as #2166ac.
type Bar struct {
	Name  string
	Value float64
	Color string
}

// The geometry in SVG user units.
const (
	width, left, right    = 1200.0, 90.0, 30.0
	plotH, stub           = 200.0, 2.0
	titleSize, subSize    = 22, 14
	headingSize, tickSz   = 18, 12
	labelSize, lineStep   = 12, 14.0
	ink, axisInk, gridInk = "#141414", "#3c3c3c", "#e1e1e1"
)

// Write writes the chart as a standalone SVG document.
func (c Chart) Write(w io.Writer) error {
	var b strings.Builder
	y := 34.0
	text(&b, left, y, titleSize, "start", c.Title)
	if c.Subtitle != "" {
		y += 26
		text(&b, left, y, subSize, "start", c.Subtitle)
	}
	if len(c.Legend) > 0 {
		y += 20
		b.WriteString(`<g class="legend">` + "\n")
		x := left
		for _, k := range c.Legend {
			fmt.Fprintf(&b, `<rect x="%s" y="%s" width="14" height="14" fill="%s"/>`+"\n", num(x), num(y), escape(k.Color))
			text(&b, x+20, y+12, 13, "start", k.Label)
			x += 20 + textWidth(k.Label, 13) + 24
		}
		b.WriteString("</g>\n")
		y += 14
	}
	for _, p := range c.Panels {
		y = p.write(&b, y+16)
	}
	h := math.Ceil(y + 10)
	var out strings.Builder
	out.WriteString(`<?xml version="1.0" encoding="UTF-8"?>` + "\n")
	fmt.Fprintf(&out, `<svg xmlns="http://www.w3.org/2000/svg" width="%s" height="%s" viewBox="0 0 %s %s" font-family="sans-serif">`+"\n",
		num(width), num(h), num(width), num(h))
	fmt.Fprintf(&out, `<rect width="%s" height="%s" fill="#ffffff"/>`+"\n", num(width), num(h))
	out.WriteString(b.String())
	out.WriteString("</svg>\n")
	_, err := io.WriteString(w, out.String())
	return err
}

// write draws the panel from y0 down and returns the y where it ends.
func (p Panel) write(b *strings.Builder, y0 float64) float64 {
	b.WriteString(`<g class="panel">` + "\n")
	if p.Heading != "" {
		y0 += 24
		text(b, left, y0, headingSize, "start", p.Heading)
		y0 += 12
	}
	if p.Title != "" {
		text(b, left, y0+16, subSize, "start", p.Title)
		y0 += 20
	}
	top := y0 + 24 // room for the value over a full bar
	base := top + plotH
	if p.Tick > 0 && p.Hi > p.Lo {
		for v := p.Lo; v <= p.Hi+1e-9; v += p.Tick {
			gy := p.y(v, base)
			fmt.Fprintf(b, `<path d="M%s %sH%s" stroke="%s" stroke-width="1"/>`+"\n", num(left), num(gy), num(width-right), gridInk)
			text(b, left-10, gy+4, tickSz, "end", strconv.FormatFloat(v, 'f', -1, 64))
		}
	}
	fmt.Fprintf(b, `<path d="M%s %sV%sH%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", num(left), num(top), num(base), num(width-right), axisInk)
	groupW := (width - right - left) / float64(max(len(p.Groups), 1))
	lines := 0
	for i, g := range p.Groups {
		gx := left + float64(i)*groupW
		pad := min(20, groupW/12)
		barW := (groupW - 2*pad) / float64(max(len(g.Bars), 1))
		b.WriteString(`<g class="group">` + "\n")
		for j, bar := range g.Bars {
			x := gx + pad + float64(j)*barW
			inset := barW * 0.06
			by := min(p.y(bar.Value, base), base-stub)
			label := p.format(bar.Value)
			fmt.Fprintf(b, `<rect class="bar" x="%s" y="%s" width="%s" height="%s" fill="%s"><title>%s</title></rect>`+"\n",
				num(x+inset), num(by), num(barW-2*inset), num(base-by), escape(bar.Color), escape(bar.Name+": "+label))
			text(b, x+barW/2, by-6, labelSize, "middle", label)
		}
		wrapped := wrap(g.Label, groupW-8, labelSize)
		for k, l := range wrapped {
			text(b, gx+groupW/2, base+18+float64(k)*lineStep, labelSize, "middle", l)
		}
		lines = max(lines, len(wrapped))
		b.WriteString("</g>\n")
	}
	b.WriteString("</g>\n")
	return base + 18 + float64(lines)*lineStep
}

// y maps v to the panel's y: Lo at the base, Hi plotH above it, clamped
// to the axis; NaN (no value) sits at the base.
func (p Panel) y(v, base float64) float64 {
	if math.IsNaN(v) || p.Hi <= p.Lo {
		return base
	}
	return base - (min(max(v, p.Lo), p.Hi)-p.Lo)/(p.Hi-p.Lo)*plotH
}

// format is v with the panel's decimals, "n/a" for NaN (no value).
func (p Panel) format(v float64) string {
	if math.IsNaN(v) {
		return "n/a"
	}
	return strconv.FormatFloat(v, 'f', p.Digits, 64)
}

// wrap breaks s into lines: at every "\n", and after a "-" or a space
// where a line would be wider than w at size. A word still too wide
// stays whole.
func wrap(s string, w float64, size int) []string {
	if s == "" {
		return nil
	}
	var lines []string
	for _, part := range strings.Split(s, "\n") {
		line := ""
		for _, tok := range splitAfterAny(part, "- ") {
			if line != "" && textWidth(line+strings.TrimRight(tok, " "), size) > w {
				lines = append(lines, strings.TrimRight(line, " "))
				line = ""
			}
			line += tok
		}
		lines = append(lines, strings.TrimRight(line, " "))
	}
	return lines
}

// splitAfterAny splits s after each rune in seps.
func splitAfterAny(s, seps string) []string {
	var out []string
	for s != "" {
		i := strings.IndexAny(s, seps)
		if i < 0 {
			return append(out, s)
		}
		out = append(out, s[:i+1])
		s = s[i+1:]
	}
	return out
}

// textWidth estimates the width of s in a sans-serif font at size: 0.6 em
// a character, a little wider than the average, so estimates err on the
// side of wrapping.
func textWidth(s string, size int) float64 {
	return 0.6 * float64(size) * float64(len([]rune(s)))
}

// text writes a <text> element with s escaped.
func text(b *strings.Builder, x, y float64, size int, anchor, s string) {
	fmt.Fprintf(b, `<text x="%s" y="%s" font-size="%d" fill="%s" text-anchor="%s">%s</text>`+"\n",
		num(x), num(y), size, ink, anchor, escape(s))
}

// escape is s as XML character data or a quoted attribute value.
func escape(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s)) // a strings.Builder does not fail
	return b.String()
}

// num formats a coordinate: one decimal is finer than a pixel.
func num(f float64) string { return strconv.FormatFloat(f, 'f', 1, 64) }

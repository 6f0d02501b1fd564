package main

import (
	"fmt"
	"image/color"
	"io"

	"github.com/hyperaccel/lpu-node/lab/pngchart"
)

var (
	colBG     = color.RGBA{255, 255, 255, 255}
	colAxis   = color.RGBA{60, 60, 60, 255}
	colGrid   = color.RGBA{225, 225, 225, 255}
	colText   = color.RGBA{20, 20, 20, 255}
	colPolicy = map[string]color.RGBA{
		CountBound:        {150, 150, 150, 255},
		"kubelet-default": {214, 96, 77, 255},
		"first-fit":       {244, 165, 60, 255},
		"pkg/alloc":       {33, 102, 172, 255},
	}
	chartPolicies = []string{CountBound, "kubelet-default", "first-fit", "pkg/alloc"}
)

// Chart geometry.
const (
	chartW      = 1200
	chartPanelH = 300
	chartLeft   = 90
	chartRight  = 30
	plotTop     = 60 // inside a panel, above the plot area (title, then bar labels)
	plotBot     = 40 // inside a panel, below the plot area
)

// WriteChart draws grouped bar charts, one panel per node, one group per
// mix, one bar per policy: first the contiguous admissions per arrival
// (0–100 %), then the same as a share of the count bound on a 90–100 %
// axis, where the differences between the good policies are visible.
func WriteChart(w io.Writer, cfg Config, cases []Case) error {
	const header, section = 110, 50
	var nodes []string
	for _, c := range cases {
		if len(nodes) == 0 || nodes[len(nodes)-1] != c.Node.Name {
			nodes = append(nodes, c.Node.Name)
		}
	}
	height := header + 2*chartPanelH*len(nodes) + section + 20
	c := pngchart.New(chartW, height, colBG)

	c.Text(chartLeft, 14, "CONTIGUOUS ADMISSIONS PER ARRIVAL (%)", 3, colText)
	c.Text(chartLeft, 44, fmt.Sprintf("SEED %d, %d ARRIVALS, LOAD %.2f, %s", cfg.Seed, cfg.Arrivals, cfg.Load, cfg.Mode()), 2, colText)
	lx := chartLeft
	for _, p := range chartPolicies {
		c.Rect(lx, 74, lx+18, 92, colPolicy[p])
		c.Text(lx+24, 76, p, 2, colText)
		lx += 24 + pngchart.TextWidth(p, 2) + 30
	}

	rate := func(cs Case, r Result) float64 { return 100 * r.Rate() }
	vsBound := func(cs Case, r Result) float64 { return 100 * ratio(r.Contiguous, cs.Bound().Contiguous) }
	y := header
	for _, node := range nodes {
		panel(c, y, "NODE "+node, casesOf(cases, node), rate, 0, 100, 25)
		y += chartPanelH
	}
	c.Text(chartLeft, y+14, "AS A SHARE OF THE COUNT BOUND (%), AXIS FROM 90", 3, colText)
	y += section
	for _, node := range nodes {
		panel(c, y, "NODE "+node, casesOf(cases, node), vsBound, 90, 100, 2)
		y += chartPanelH
	}
	return c.Encode(w)
}

func casesOf(cases []Case, node string) []Case {
	var out []Case
	for _, cs := range cases {
		if cs.Node.Name == node {
			out = append(out, cs)
		}
	}
	return out
}

// panel draws one node's bars with top-left corner at y. Values below lo
// are drawn as a stub at the axis; every bar is labelled with its value.
func panel(c pngchart.Canvas, y0 int, title string, group []Case, value func(Case, Result) float64, lo, hi, tick float64) {
	plotY0, plotY1 := y0+plotTop, y0+chartPanelH-plotBot
	plotH := float64(plotY1 - plotY0)
	c.Text(chartLeft, y0+8, title, 2, colText)
	for g := lo; g <= hi+1e-9; g += tick {
		y := plotY1 - int((g-lo)/(hi-lo)*plotH+0.5)
		c.Rect(chartLeft, y, chartW-chartRight, y+1, colGrid)
		lbl := fmt.Sprintf("%.0f", g)
		c.Text(chartLeft-12-pngchart.TextWidth(lbl, 2), y-7, lbl, 2, colAxis)
	}
	c.Rect(chartLeft, plotY0, chartLeft+2, plotY1+1, colAxis)
	c.Rect(chartLeft, plotY1, chartW-chartRight, plotY1+2, colAxis)

	groupW := (chartW - chartRight - chartLeft) / max(len(group), 1)
	barW := (groupW - 40) / len(chartPolicies)
	for gi, cs := range group {
		gx := chartLeft + gi*groupW + 20
		for bi, p := range chartPolicies {
			var v float64
			for _, r := range cs.Results {
				if r.Policy == p {
					v = value(cs, r)
				}
			}
			x := gx + bi*barW
			h := int((min(max(v, lo), hi)-lo)/(hi-lo)*plotH + 0.5)
			h = max(h, 2)
			c.Rect(x+3, plotY1-h, x+barW-3, plotY1, colPolicy[p])
			lbl := fmt.Sprintf("%.1f", v)
			if hi-lo < 50 {
				lbl = fmt.Sprintf("%.2f", v)
			}
			c.Text(x+barW/2-pngchart.TextWidth(lbl, 2)/2, plotY1-h-18, lbl, 2, colText)
		}
		name := cs.Mix.Name
		c.Text(gx+(groupW-40)/2-pngchart.TextWidth(name, 2)/2, plotY1+12, name, 2, colText)
	}
}

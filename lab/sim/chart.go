package main

import (
	"fmt"
	"io"

	"github.com/hyperaccel/lpu-node/lab/svgchart"
)

var (
	colPolicy = map[string]string{
		CountBound:        "#969696",
		"kubelet-default": "#d6604d",
		"first-fit":       "#f4a53c",
		"pkg/alloc":       "#2166ac",
	}
	chartPolicies = []string{CountBound, "kubelet-default", "first-fit", "pkg/alloc"}
)

// WriteChart draws grouped bar charts as SVG, one panel per node, one
// group per mix, one bar per policy: first the contiguous admissions per
// arrival (0–100 %), then the same as a share of the count bound on a
// 90–100 % axis, where the differences between the good policies are
// visible.
func WriteChart(w io.Writer, cfg Config, cases []Case) error {
	var nodes []string
	for _, c := range cases {
		if len(nodes) == 0 || nodes[len(nodes)-1] != c.Node.Name {
			nodes = append(nodes, c.Node.Name)
		}
	}
	c := svgchart.Chart{
		Title:    "Contiguous admissions per arrival (%)",
		Subtitle: fmt.Sprintf("seed %d, %d arrivals, load %.2f, %s", cfg.Seed, cfg.Arrivals, cfg.Load, cfg.Mode()),
	}
	for _, p := range chartPolicies {
		c.Legend = append(c.Legend, svgchart.Key{Label: p, Color: colPolicy[p]})
	}
	rate := func(cs Case, r Result) float64 { return 100 * r.Rate() }
	vsBound := func(cs Case, r Result) float64 { return 100 * ratio(r.Contiguous, cs.Bound().Contiguous) }
	for _, node := range nodes {
		c.Panels = append(c.Panels, panel("node "+node, casesOf(cases, node), rate, 0, 100, 25, 1))
	}
	for i, node := range nodes {
		p := panel("node "+node, casesOf(cases, node), vsBound, 90, 100, 2, 2)
		if i == 0 {
			p.Heading = "As a share of the count bound (%), axis from 90"
		}
		c.Panels = append(c.Panels, p)
	}
	return c.Write(w)
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

// panel is one node's bars: a group per mix, a bar per policy, on an
// axis from lo to hi (values below lo are drawn as a stub at the axis,
// every bar is labelled with its value).
func panel(title string, group []Case, value func(Case, Result) float64, lo, hi, tick float64, digits int) svgchart.Panel {
	p := svgchart.Panel{Title: title, Lo: lo, Hi: hi, Tick: tick, Digits: digits}
	for _, cs := range group {
		g := svgchart.Group{Label: cs.Mix.Name}
		for _, pol := range chartPolicies {
			var v float64
			for _, r := range cs.Results {
				if r.Policy == pol {
					v = value(cs, r)
				}
			}
			g.Bars = append(g.Bars, svgchart.Bar{Name: pol, Value: v, Color: colPolicy[pol]})
		}
		p.Groups = append(p.Groups, g)
	}
	return p
}

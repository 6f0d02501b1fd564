package main

import (
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"strings"
)

// The chart is drawn by hand with the standard library: filled rectangles
// and a 5×7 bitmap font (upper case, digits, a few signs).

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

// glyphs is a 5×7 font; each row is 5 cells, '#' set.
var glyphs = map[rune][7]string{
	'A': {" ### ", "#   #", "#   #", "#####", "#   #", "#   #", "#   #"},
	'B': {"#### ", "#   #", "#   #", "#### ", "#   #", "#   #", "#### "},
	'C': {" ### ", "#   #", "#    ", "#    ", "#    ", "#   #", " ### "},
	'D': {"#### ", "#   #", "#   #", "#   #", "#   #", "#   #", "#### "},
	'E': {"#####", "#    ", "#    ", "#### ", "#    ", "#    ", "#####"},
	'F': {"#####", "#    ", "#    ", "#### ", "#    ", "#    ", "#    "},
	'G': {" ### ", "#   #", "#    ", "# ###", "#   #", "#   #", " ####"},
	'H': {"#   #", "#   #", "#   #", "#####", "#   #", "#   #", "#   #"},
	'I': {" ### ", "  #  ", "  #  ", "  #  ", "  #  ", "  #  ", " ### "},
	'J': {"  ###", "   # ", "   # ", "   # ", "   # ", "#  # ", " ##  "},
	'K': {"#   #", "#  # ", "# #  ", "##   ", "# #  ", "#  # ", "#   #"},
	'L': {"#    ", "#    ", "#    ", "#    ", "#    ", "#    ", "#####"},
	'M': {"#   #", "## ##", "# # #", "# # #", "#   #", "#   #", "#   #"},
	'N': {"#   #", "#   #", "##  #", "# # #", "#  ##", "#   #", "#   #"},
	'O': {" ### ", "#   #", "#   #", "#   #", "#   #", "#   #", " ### "},
	'P': {"#### ", "#   #", "#   #", "#### ", "#    ", "#    ", "#    "},
	'Q': {" ### ", "#   #", "#   #", "#   #", "# # #", "#  # ", " ## #"},
	'R': {"#### ", "#   #", "#   #", "#### ", "# #  ", "#  # ", "#   #"},
	'S': {" ####", "#    ", "#    ", " ### ", "    #", "    #", "#### "},
	'T': {"#####", "  #  ", "  #  ", "  #  ", "  #  ", "  #  ", "  #  "},
	'U': {"#   #", "#   #", "#   #", "#   #", "#   #", "#   #", " ### "},
	'V': {"#   #", "#   #", "#   #", "#   #", "#   #", " # # ", "  #  "},
	'W': {"#   #", "#   #", "#   #", "# # #", "# # #", "# # #", " # # "},
	'X': {"#   #", "#   #", " # # ", "  #  ", " # # ", "#   #", "#   #"},
	'Y': {"#   #", "#   #", " # # ", "  #  ", "  #  ", "  #  ", "  #  "},
	'Z': {"#####", "    #", "   # ", "  #  ", " #   ", "#    ", "#####"},
	'0': {" ### ", "#   #", "#  ##", "# # #", "##  #", "#   #", " ### "},
	'1': {"  #  ", " ##  ", "  #  ", "  #  ", "  #  ", "  #  ", " ### "},
	'2': {" ### ", "#   #", "    #", "   # ", "  #  ", " #   ", "#####"},
	'3': {"#####", "   # ", "  #  ", "   # ", "    #", "#   #", " ### "},
	'4': {"   # ", "  ## ", " # # ", "#  # ", "#####", "   # ", "   # "},
	'5': {"#####", "#    ", "#### ", "    #", "    #", "#   #", " ### "},
	'6': {"  ## ", " #   ", "#    ", "#### ", "#   #", "#   #", " ### "},
	'7': {"#####", "    #", "   # ", "  #  ", " #   ", " #   ", " #   "},
	'8': {" ### ", "#   #", "#   #", " ### ", "#   #", "#   #", " ### "},
	'9': {" ### ", "#   #", "#   #", " ####", "    #", "   # ", " ##  "},
	'.': {"     ", "     ", "     ", "     ", "     ", " ##  ", " ##  "},
	',': {"     ", "     ", "     ", "     ", " ##  ", "  #  ", " #   "},
	'%': {"##   ", "##  #", "   # ", "  #  ", " #   ", "#  ##", "   ##"},
	'-': {"     ", "     ", "     ", "#####", "     ", "     ", "     "},
	'/': {"     ", "    #", "   # ", "  #  ", " #   ", "#    ", "     "},
	':': {"     ", " ##  ", " ##  ", "     ", " ##  ", " ##  ", "     "},
	'(': {"   # ", "  #  ", " #   ", " #   ", " #   ", "  #  ", "   # "},
	')': {" #   ", "  #  ", "   # ", "   # ", "   # ", "  #  ", " #   "},
	'=': {"     ", "     ", "#####", "     ", "#####", "     ", "     "},
	'+': {"     ", "  #  ", "  #  ", "#####", "  #  ", "  #  ", "     "},
	' ': {"     ", "     ", "     ", "     ", "     ", "     ", "     "},
}

type canvas struct{ img *image.RGBA }

func (c canvas) rect(x0, y0, x1, y1 int, col color.RGBA) {
	for y := max(y0, 0); y < min(y1, c.img.Rect.Max.Y); y++ {
		for x := max(x0, 0); x < min(x1, c.img.Rect.Max.X); x++ {
			c.img.SetRGBA(x, y, col)
		}
	}
}

// textWidth is the width of s at scale px per font cell.
func textWidth(s string, px int) int { return len([]rune(s)) * 6 * px }

// text draws s with its top-left corner at x, y; unknown runes are blank.
func (c canvas) text(x, y int, s string, px int, col color.RGBA) {
	for i, r := range strings.ToUpper(s) {
		g := glyphs[r]
		for row, line := range g {
			for cell, ch := range line {
				if ch == '#' {
					cx := x + (i*6+cell)*px
					c.rect(cx, y+row*px, cx+px, y+(row+1)*px, col)
				}
			}
		}
	}
}

// WriteChart draws a grouped bar chart: one panel per node, one group per
// mix, one bar per policy, bar height = contiguous admissions per arrival.
func WriteChart(w io.Writer, cfg Config, cases []Case) error {
	const (
		width   = 1200
		panelH  = 300
		top     = 110
		left    = 90
		right   = 30
		plotTop = 40 // inside a panel, above the plot area
		plotBot = 40 // inside a panel, below the plot area
	)
	var nodes []string
	for _, c := range cases {
		if len(nodes) == 0 || nodes[len(nodes)-1] != c.Node.Name {
			nodes = append(nodes, c.Node.Name)
		}
	}
	height := top + panelH*len(nodes) + 20
	c := canvas{img: image.NewRGBA(image.Rect(0, 0, width, height))}
	c.rect(0, 0, width, height, colBG)

	mode := "BEST-EFFORT"
	if cfg.Strict {
		mode = "STRICT"
	}
	c.text(left, 14, "CONTIGUOUS ADMISSIONS PER ARRIVAL (%)", 3, colText)
	c.text(left, 44, fmt.Sprintf("SEED %d, %d ARRIVALS, LOAD %.2f, %s", cfg.Seed, cfg.Arrivals, cfg.Load, mode), 2, colText)
	lx := left
	for _, p := range chartPolicies {
		c.rect(lx, 74, lx+18, 92, colPolicy[p])
		c.text(lx+24, 76, p, 2, colText)
		lx += 24 + textWidth(p, 2) + 30
	}

	for pi, node := range nodes {
		y0 := top + pi*panelH
		plotY0, plotY1 := y0+plotTop, y0+panelH-plotBot
		plotH := plotY1 - plotY0
		c.text(left, y0+8, "NODE "+node, 2, colText)
		for g := 0; g <= 100; g += 25 {
			y := plotY1 - g*plotH/100
			c.rect(left, y, width-right, y+1, colGrid)
			lbl := fmt.Sprintf("%d", g)
			c.text(left-12-textWidth(lbl, 2), y-7, lbl, 2, colAxis)
		}
		c.rect(left, plotY0, left+2, plotY1+1, colAxis)
		c.rect(left, plotY1, width-right, plotY1+2, colAxis)

		var group []Case
		for _, cs := range cases {
			if cs.Node.Name == node {
				group = append(group, cs)
			}
		}
		groupW := (width - right - left) / max(len(group), 1)
		barW := (groupW - 40) / len(chartPolicies)
		for gi, cs := range group {
			gx := left + gi*groupW + 20
			for bi, p := range chartPolicies {
				var rate float64
				for _, r := range cs.Results {
					if r.Policy == p {
						rate = r.Rate()
					}
				}
				x := gx + bi*barW
				h := int(rate*float64(plotH) + 0.5)
				c.rect(x+3, plotY1-h, x+barW-3, plotY1, colPolicy[p])
				lbl := fmt.Sprintf("%.1f", 100*rate)
				c.text(x+barW/2-textWidth(lbl, 2)/2, plotY1-h-18, lbl, 2, colText)
			}
			name := cs.Mix.Name
			c.text(gx+(groupW-40)/2-textWidth(name, 2)/2, plotY1+12, name, 2, colText)
		}
	}
	return png.Encode(w, c.img)
}

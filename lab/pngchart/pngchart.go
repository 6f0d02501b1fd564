package pngchart

import (
	"image"
	"image/color"
	"image/png"
	"io"
	"strings"
)

// The charts are drawn by hand with the standard library: filled rectangles
// and a 5×7 bitmap font (upper case, digits, a few signs).

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

// Canvas is an RGBA image to draw bars and text on.
type Canvas struct{ Img *image.RGBA }

// New returns a w×h canvas filled with bg.
func New(w, h int, bg color.RGBA) Canvas {
	c := Canvas{Img: image.NewRGBA(image.Rect(0, 0, w, h))}
	c.Rect(0, 0, w, h, bg)
	return c
}

// Encode writes the canvas as PNG.
func (c Canvas) Encode(w io.Writer) error { return png.Encode(w, c.Img) }

// Rect fills the rectangle [x0,x1)×[y0,y1), clipped to the canvas.
func (c Canvas) Rect(x0, y0, x1, y1 int, col color.RGBA) {
	for y := max(y0, 0); y < min(y1, c.Img.Rect.Max.Y); y++ {
		for x := max(x0, 0); x < min(x1, c.Img.Rect.Max.X); x++ {
			c.Img.SetRGBA(x, y, col)
		}
	}
}

// TextWidth is the width of s at scale px per font cell.
func TextWidth(s string, px int) int { return len([]rune(s)) * 6 * px }

// Text draws s with its top-left corner at x, y; unknown runes are blank.
func (c Canvas) Text(x, y int, s string, px int, col color.RGBA) {
	for i, r := range strings.ToUpper(s) {
		g := glyphs[r]
		for row, line := range g {
			for cell, ch := range line {
				if ch == '#' {
					cx := x + (i*6+cell)*px
					c.Rect(cx, y+row*px, cx+px, y+(row+1)*px, col)
				}
			}
		}
	}
}

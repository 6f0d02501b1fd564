package pngchart

import (
	"bytes"
	"image/color"
	"image/png"
	"testing"
)

func TestDrawAndEncode(t *testing.T) {
	bg, fg := color.RGBA{255, 255, 255, 255}, color.RGBA{10, 20, 30, 255}
	c := New(40, 20, bg)
	c.Rect(5, 5, 10, 10, fg)
	c.Rect(35, 15, 100, 100, fg) // clipped, no panic
	c.Text(12, 2, "A1%", 1, fg)
	if w := TextWidth("A1%", 2); w != 36 {
		t.Fatalf("TextWidth = %d, want 36", w)
	}
	var buf bytes.Buffer
	if err := c.Encode(&buf); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&buf)
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		x, y int
		want color.RGBA
	}{
		"inside rect":  {7, 7, fg},
		"outside rect": {11, 11, bg},
		"clipped rect": {39, 19, fg},
		"letter A top": {14, 2, fg}, // " ### " row 0, cell 2
		"letter gap":   {12, 2, bg},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r, g, b, _ := img.At(tc.x, tc.y).RGBA()
			got := color.RGBA{uint8(r >> 8), uint8(g >> 8), uint8(b >> 8), 255}
			if got != tc.want {
				t.Fatalf("pixel (%d,%d) = %v, want %v", tc.x, tc.y, got, tc.want)
			}
		})
	}
}

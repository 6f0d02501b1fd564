// Package pngchart draws simple bar charts as PNG with the standard library
// only: filled rectangles and a 5×7 bitmap font (upper case, digits and a
// few signs). The simulator and the cluster harness draw their result
// charts with it, so the benchmark pages need no plotting dependency.
//
//	c := pngchart.New(400, 200, color.RGBA{255, 255, 255, 255})
//	c.Rect(10, 50, 40, 190, color.RGBA{33, 102, 172, 255})
//	c.Text(10, 10, "CONTIGUOUS %", 2, color.RGBA{20, 20, 20, 255})
//	err := c.Encode(w)
package pngchart

// Package svgchart writes bar charts as SVG with the standard library:
// panels of grouped bars on a linear y axis, stacked under a title and a
// legend. Text is SVG <text>, set in the viewer's sans-serif font, so
// there is no font to draw; every bar carries a <title> (its name and
// value) that a browser shows on hover. The simulator and the cluster
// harness draw their result charts with it.
//
//	c := svgchart.Chart{
//		Title:  "Contiguous starts (%)",
//		Legend: []svgchart.Key{{Label: "pkg/alloc", Color: "#2166ac"}},
//		Panels: []svgchart.Panel{{Lo: 0, Hi: 100, Tick: 25, Digits: 1,
//			Groups: []svgchart.Group{{Label: "default", Bars: []svgchart.Bar{
//				{Name: "pkg/alloc", Value: 96.1, Color: "#2166ac"}}}}}},
//	}
//	err := c.Write(w)
package svgchart

package main

import "github.com/hyperaccel/lpu-node/pkg/alloc"

// draOrder is the DRA allocator on lpu-dra's slices: it takes the first
// free arc of the requested size in published order (alloc.ArcOrder), and
// with no arc left falls back, like the best-effort claim template, to
// single LPUs in published order. static publishes the order of an empty
// node once; dynamic republishes after every change, as lpu-dra does after
// Prepare and Unprepare.
type draOrder struct {
	l       *alloc.Layout
	dynamic bool
	static  []alloc.Arc
	ids     map[alloc.Arc][]string
	all     []string
}

func newDRA(l *alloc.Layout, dynamic bool) *draOrder {
	d := &draOrder{l: l, dynamic: dynamic, static: l.ArcOrder(nil), ids: map[alloc.Arc][]string{}}
	for _, a := range l.Arcs() {
		d.ids[a] = l.ArcIDs(a)
	}
	for _, ring := range l.Rings() {
		d.all = append(d.all, ring...)
	}
	return d
}

func (d *draOrder) Name() string {
	if d.dynamic {
		return "dra-dynamic"
	}
	return "dra-static"
}

func (d *draOrder) Pick(available []string, size int) []string {
	if size > len(available) {
		return nil
	}
	free := make(map[string]bool, len(available))
	for _, id := range available {
		free[id] = true
	}
	order := d.static
	if d.dynamic {
		var held []string
		for _, id := range d.all {
			if !free[id] {
				held = append(held, id)
			}
		}
		order = d.l.ArcOrder(held)
	}
	fits := func(a alloc.Arc) bool {
		for _, id := range d.ids[a] {
			if !free[id] {
				return false
			}
		}
		return true
	}
	for _, a := range order {
		if a.Size == size && fits(a) {
			return append([]string(nil), d.ids[a]...)
		}
	}
	var out []string
	for _, a := range order {
		if a.Size == 1 && fits(a) {
			out = append(out, d.ids[a][0])
			if len(out) == size {
				return out
			}
		}
	}
	return nil
}

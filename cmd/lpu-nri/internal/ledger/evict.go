package ledger

import (
	"container/heap"
	"fmt"
	"slices"
	"time"
)

// The eviction order: a min-heap, by last seen, of the IDs of pods that
// are not live, so a new ID at the cap costs O(log n), not a pass over
// every entry. Items go stale (the ID was dropped, its pod became live,
// or it was seen again) and are discarded when popped; the heap is
// rebuilt when the stale ones pile up or the live set is replaced.

type candidate struct {
	id   string
	seen time.Time
}

type candidates []candidate

func (h candidates) Len() int { return len(h) }
func (h candidates) Less(i, j int) bool {
	if !h[i].seen.Equal(h[j].seen) {
		return h[i].seen.Before(h[j].seen)
	}
	return h[i].id < h[j].id
}
func (h candidates) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *candidates) Push(x any)   { *h = append(*h, x.(candidate)) }
func (h *candidates) Pop() any {
	old := *h
	c := old[len(old)-1]
	*h = old[:len(old)-1]
	return c
}

// put records e for id, indexes it by pod, and makes it an eviction
// candidate unless its pod is live.
func (l *Ledger) put(id string, e entry) {
	switch old, ok := l.entries[id]; {
	case !ok:
		l.byPod[e.Pod] = append(l.byPod[e.Pod], id)
	case old.Pod != e.Pod:
		l.unindex(id, old.Pod)
		l.byPod[e.Pod] = append(l.byPod[e.Pod], id)
	}
	l.entries[id] = e
	if !l.live[e.Pod] {
		l.push(candidate{id: id, seen: e.Seen})
	}
}

// drop forgets id.
func (l *Ledger) drop(id string) {
	if e, ok := l.entries[id]; ok {
		l.unindex(id, e.Pod)
		delete(l.entries, id)
	}
}

func (l *Ledger) unindex(id, pod string) {
	ids := l.byPod[pod]
	if i := slices.Index(ids, id); i >= 0 {
		ids = slices.Delete(ids, i, i+1)
	}
	if len(ids) == 0 {
		delete(l.byPod, pod)
		return
	}
	l.byPod[pod] = ids
}

func (l *Ledger) push(c candidate) {
	heap.Push(&l.order, c)
	if len(l.order) > 2*len(l.entries)+64 {
		l.rebuild()
	}
}

// rebuild makes the heap from the entries of pods that are not live.
func (l *Ledger) rebuild() {
	l.order = l.order[:0]
	for id, e := range l.entries {
		if !l.live[e.Pod] {
			l.order = append(l.order, candidate{id: id, seen: e.Seen})
		}
	}
	heap.Init(&l.order)
}

// valid reports whether c still names an evictable entry as it is.
func (l *Ledger) valid(c candidate) bool {
	e, ok := l.entries[c.id]
	return ok && !l.live[e.Pod] && e.Seen.Equal(c.seen)
}

// victims returns the IDs to evict so that adding n IDs stays within
// MaxEntries: the least recently seen IDs of pods that are not live. They
// leave the heap; a caller that does not evict them after all gives them
// back with restore. It returns ErrFull when there are not enough.
func (l *Ledger) victims(n int) ([]string, error) {
	over := len(l.entries) + n - MaxEntries
	if over <= 0 {
		return nil, nil
	}
	var out []candidate
	for len(out) < over && len(l.order) > 0 {
		c := heap.Pop(&l.order).(candidate)
		if l.valid(c) && !slices.ContainsFunc(out, func(o candidate) bool { return o.id == c.id }) {
			out = append(out, c)
		}
	}
	if len(out) < over {
		l.restore(out)
		return nil, fmt.Errorf("%w: all %d recorded allocation IDs belong to running pods; refusing new allocation IDs until pods are removed", ErrFull, len(l.entries))
	}
	ids := make([]string, len(out))
	for i, c := range out {
		ids[i] = c.id
	}
	return ids, nil
}

// restore gives victims back to the heap.
func (l *Ledger) restore(cs []candidate) {
	for _, c := range cs {
		heap.Push(&l.order, c)
	}
}

// restoreIDs gives the victims named by ids back to the heap.
func (l *Ledger) restoreIDs(ids []string) {
	for _, id := range ids {
		if e, ok := l.entries[id]; ok {
			heap.Push(&l.order, candidate{id: id, seen: e.Seen})
		}
	}
}

package ledger

import (
	"container/heap"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// The eviction order: a min-heap, by last seen, of the IDs of pods that
// are not live, so a new ID at the cap costs O(log n), not a pass over
// every entry; with EvictIdle a second one of live pods' idle IDs, used
// when the first is empty. Items go stale (the ID was dropped, its pod
// became live, or it was seen again) and are discarded when popped; the
// heaps are rebuilt when the stale ones pile up or the live set is
// replaced.

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

// put records e for id, indexes it by pod and namespace, and makes it an
// eviction candidate unless its pod is live (or, with EvictIdle, while it
// is idle).
func (l *Ledger) put(id string, e entry) {
	switch old, ok := l.entries[id]; {
	case !ok:
		l.byPod[e.Pod] = append(l.byPod[e.Pod], id)
		l.perNS[e.NS]++
	case old.Pod != e.Pod || old.NS != e.NS:
		l.unindex(id, old)
		l.byPod[e.Pod] = append(l.byPod[e.Pod], id)
		l.perNS[e.NS]++
	}
	l.entries[id] = e
	if h := l.heapOf(e); h != nil {
		l.push(h, candidate{id: id, seen: e.Seen})
	}
}

// drop forgets id.
func (l *Ledger) drop(id string) {
	if e, ok := l.entries[id]; ok {
		l.unindex(id, e)
		delete(l.entries, id)
	}
}

func (l *Ledger) unindex(id string, e entry) {
	if l.perNS[e.NS]--; l.perNS[e.NS] <= 0 {
		delete(l.perNS, e.NS)
	}
	pod := e.Pod
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

func (l *Ledger) push(h *candidates, c candidate) {
	heap.Push(h, c)
	if len(*h) > 2*len(l.entries)+64 {
		l.rebuild()
	}
}

// rebuild makes the heaps from the entries that are evictable.
func (l *Ledger) rebuild() {
	l.order, l.idle = l.order[:0], l.idle[:0]
	for id, e := range l.entries {
		if h := l.heapOf(e); h != nil {
			*h = append(*h, candidate{id: id, seen: e.Seen})
		}
	}
	heap.Init(&l.order)
	heap.Init(&l.idle)
}

// heapOf is the eviction heap e belongs in: order when its pod is gone,
// idle (with EvictIdle) when its container stopped; nil when e may not be
// evicted.
func (l *Ledger) heapOf(e entry) *candidates {
	switch {
	case !l.isLive(e.Pod):
		return &l.order
	case l.evictIdle && e.idle:
		return &l.idle
	}
	return nil
}

// evictable reports whether e may be evicted.
func (l *Ledger) evictable(e entry) bool { return l.heapOf(e) != nil }

// valid reports whether c still names an evictable entry as it is.
func (l *Ledger) valid(c candidate) bool {
	e, ok := l.entries[c.id]
	return ok && l.evictable(e) && e.Seen.Equal(c.seen)
}

// room returns the IDs to evict for a new ID of h: first within the pod's
// or the namespace's share when it is used up (ErrShare when nothing of
// it is evictable), then node-wide (victims).
func (l *Ledger) room(h Holder) ([]string, error) {
	var taken []string
	if ids := l.byPod[h.Pod]; len(ids) >= MaxPerPod {
		v, ok := l.oldest(func(id string, e entry) bool { return e.Pod == h.Pod }, ids)
		if !ok {
			return nil, fmt.Errorf("%w: pod UID %s (namespace %q) holds %d allocation IDs, its share of %d (one per container that requests LPUs); refusing more for this pod",
				ErrShare, h.Pod, h.Namespace, len(ids), MaxPerPod)
		}
		taken = append(taken, v)
	} else if h.Namespace != "" && l.perNS[h.Namespace] >= MaxPerNamespace {
		v, ok := l.oldest(func(id string, e entry) bool { return e.NS == h.Namespace }, nil)
		if !ok {
			return nil, fmt.Errorf("%w: namespace %q holds %d allocation IDs, its share, all of running containers; refusing new ones for this namespace until its pods are removed",
				ErrShare, h.Namespace, l.perNS[h.Namespace])
		}
		taken = append(taken, v)
	}
	more, err := l.victims(1, taken)
	if err != nil {
		return nil, err
	}
	return append(taken, more...), nil
}

// oldest returns the least recently seen evictable ID that match selects,
// gone pods' before idle ones, scanning ids (or every entry when nil): a
// pass only when a pod or namespace is at its share.
func (l *Ledger) oldest(match func(string, entry) bool, ids []string) (string, bool) {
	var best candidate
	bestGone, found := false, false
	consider := func(id string, e entry) {
		if !match(id, e) || !l.evictable(e) {
			return
		}
		gone := !l.isLive(e.Pod)
		c := candidate{id: id, seen: e.Seen}
		if !found || (gone && !bestGone) || (gone == bestGone && (candidates{c, best}).Less(0, 1)) {
			best, bestGone, found = c, gone, true
		}
	}
	if ids != nil {
		for _, id := range ids {
			consider(id, l.entries[id])
		}
	} else {
		for id, e := range l.entries {
			consider(id, e)
		}
	}
	return best.id, found
}

// victims returns the IDs to evict so that adding n IDs, with taken
// evicted already, stays within MaxEntries: the least recently seen IDs
// of pods that are not live, then (EvictIdle) idle ones. They leave the
// heaps; a caller that does not evict them after all gives them back with
// restoreIDs. It returns ErrFull, naming the biggest holders, when there
// are not enough.
func (l *Ledger) victims(n int, taken []string) ([]string, error) {
	over := len(l.entries) - len(taken) + n - MaxEntries
	if over <= 0 {
		return nil, nil
	}
	var out []candidate
	for _, h := range []*candidates{&l.order, &l.idle} {
		for len(out) < over && len(*h) > 0 {
			c := heap.Pop(h).(candidate)
			if l.valid(c) && !slices.Contains(taken, c.id) && !slices.ContainsFunc(out, func(o candidate) bool { return o.id == c.id }) {
				out = append(out, c)
			}
		}
	}
	ids := make([]string, len(out))
	for i, c := range out {
		ids[i] = c.id
	}
	if len(out) < over {
		l.restoreIDs(ids)
		return nil, fmt.Errorf("%w: all %d recorded allocation IDs belong to running pods (most held by %s); refusing new allocation IDs until pods are removed",
			ErrFull, len(l.entries), l.describeHolders(3))
	}
	return ids, nil
}

// restoreIDs gives the victims named by ids back to their heap.
func (l *Ledger) restoreIDs(ids []string) {
	for _, id := range ids {
		if e, ok := l.entries[id]; ok {
			if h := l.heapOf(e); h != nil {
				heap.Push(h, candidate{id: id, seen: e.Seen})
			}
		}
	}
}

// Share is how many IDs one namespace or pod holds.
type Share struct {
	Name string // namespace, or pod UID
	IDs  int
}

// Holders returns the k namespaces and the k pods holding the most IDs,
// most first: what a full ledger's log and metrics name.
func (l *Ledger) Holders(k int) (namespaces, pods []Share) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.holders(k)
}

func (l *Ledger) holders(k int) (namespaces, pods []Share) {
	perPod := make(map[string]int, len(l.byPod))
	for pod, ids := range l.byPod {
		perPod[pod] = len(ids)
	}
	return top(l.perNS, k), top(perPod, k)
}

// top returns the k largest counts, largest first, ties by name.
func top(counts map[string]int, k int) []Share {
	out := make([]Share, 0, len(counts))
	for name, n := range counts {
		out = append(out, Share{Name: name, IDs: n})
	}
	slices.SortFunc(out, func(a, b Share) int {
		if a.IDs != b.IDs {
			return b.IDs - a.IDs
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out[:min(k, len(out))]
}

// describeHolders names the k biggest namespaces and pods, for an error.
func (l *Ledger) describeHolders(k int) string {
	nss, pods := l.holders(k)
	var b strings.Builder
	for i, s := range nss {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "namespace %q: %d", s.Name, s.IDs)
	}
	for _, s := range pods {
		fmt.Fprintf(&b, ", pod UID %s: %d", s.Name, s.IDs)
	}
	return b.String()
}

// Namespaces returns how many IDs each namespace holds ("" for records
// without one), for the lpu_nri_ledger_ids gauge.
func (l *Ledger) Namespaces() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.perNS)
}

package ledger

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fullOfGonePods opens a ledger in a temporary directory holding
// MaxEntries IDs of pods that are gone, so each new ID evicts one.
func fullOfGonePods(b *testing.B) *Ledger {
	b.Helper()
	l, err := Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	seen := time.Now() // within Retention: Prune keeps them
	for i := range MaxEntries {
		l.put(fmt.Sprintf("f%031x", i), entry{Pod: fmt.Sprintf("gone-%d", i), Seen: seen})
	}
	if err := l.compact(); err != nil {
		b.Fatal(err)
	}
	if err := l.Prune(map[string]bool{"live": true}); err != nil {
		b.Fatal(err)
	}
	return l
}

// report sorts lat and reports its p50 and p99, and the fdatasyncs per
// Claim (below 1 when concurrent Claims shared them).
func report(b *testing.B, l *Ledger, lat []time.Duration, flushes0 uint64) {
	b.Helper()
	if l.Len() != MaxEntries {
		b.Fatalf("len %d", l.Len())
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1e3, "p99-µs")
	l.mu.Lock()
	b.ReportMetric(float64(l.flushes-flushes0)/float64(len(lat)), "fsyncs/claim")
	l.mu.Unlock()
}

// BenchmarkLedgerNewID records new IDs one after another into a ledger
// at MaxEntries entries of gone pods (each new ID evicts one), through
// the real write and fdatasync, and reports the p50 and p99 latency of
// one Claim.
func BenchmarkLedgerNewID(b *testing.B) {
	l := fullOfGonePods(b)
	flushes0 := l.flushes
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if err := l.Claim(fmt.Sprintf("%032x", i), fmt.Sprintf("pod-%d", i)); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
		l.PodGone(fmt.Sprintf("pod-%d", i))
	}
	b.StopTimer()
	report(b, l, lat, flushes0)
}

// BenchmarkLedgerNewIDParallel is the same with concurrent Claims, as
// containerd sends the CreateContainers of pods starting together
// (b.RunParallel: GOMAXPROCS × 4 goroutines; vary with -cpu): they share
// fdatasyncs (group commit).
func BenchmarkLedgerNewIDParallel(b *testing.B) {
	l := fullOfGonePods(b)
	flushes0 := l.flushes
	var (
		next atomic.Int64
		mu   sync.Mutex
		lat  = make([]time.Duration, 0, b.N)
	)
	b.SetParallelism(4)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		var mine []time.Duration
		for pb.Next() {
			i := next.Add(1)
			pod := fmt.Sprintf("pod-%d", i)
			start := time.Now()
			if err := l.Claim(fmt.Sprintf("%032x", i), pod); err != nil {
				b.Error(err)
				return
			}
			mine = append(mine, time.Since(start))
			l.PodGone(pod)
		}
		mu.Lock()
		lat = append(lat, mine...)
		mu.Unlock()
	})
	b.StopTimer()
	report(b, l, lat, flushes0)
}

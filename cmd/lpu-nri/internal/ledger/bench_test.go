package ledger

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The benchmarks keep a ledger at MaxEntries IDs of gone pods, so every
// new ID also evicts one, and claim through the real write and fdatasync
// on the file system of TMPDIR. Sub-benchmarks:
//
//   - ack=written: Claim as lpu-nri runs it (returns once the batch is in
//     the log; the fdatasync runs in the background): CreateContainer's
//     cost;
//   - ack=written+start: the same, then SyncPod at once, as a
//     StartContainer arriving with no delay would (in containerd the
//     runtime's own container creation, tens of ms, lies in between):
//     start-p99 is the wait StartContainer can see at worst;
//   - ack=synced: SyncOnClaim, Claim waits for its fdatasync.

// fullOfGonePods opens a ledger in a temporary directory holding
// MaxEntries IDs of pods that are gone.
func fullOfGonePods(b *testing.B, opts ...Option) *Ledger {
	b.Helper()
	l, err := Open(b.TempDir(), opts...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	seen := time.Now() // within Retention: Prune keeps them
	l.mu.Lock()
	for i := range MaxEntries {
		l.put(fmt.Sprintf("f%031x", i), entry{Pod: fmt.Sprintf("gone-%d", i), Seen: seen})
	}
	err = l.compact()
	l.mu.Unlock()
	if err != nil {
		b.Fatal(err)
	}
	if err := l.Prune(only(map[string]bool{"live": true})); err != nil {
		b.Fatal(err)
	}
	return l
}

// percentiles reports lat's p50 and p99 under name.
func percentiles(b *testing.B, name string, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, name+"-p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1e3, name+"-p99-µs")
	b.ReportMetric(float64(lat[len(lat)-1].Nanoseconds())/1e3, name+"-max-µs")
}

// fsyncs reports the fdatasyncs per Claim since flushes0 (below 1 when
// Claims shared them).
func fsyncs(b *testing.B, l *Ledger, flushes0 uint64, claims int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.entries) != MaxEntries {
		b.Fatalf("len %d", len(l.entries))
	}
	b.ReportMetric(float64(l.flushes-flushes0)/float64(claims), "fsyncs/claim")
}

var modes = []struct {
	name  string
	start bool
	opts  []Option
}{
	{name: "ack=written"},
	{name: "ack=written+start", start: true},
	{name: "ack=synced", opts: []Option{SyncOnClaim()}},
}

// BenchmarkLedgerNewID claims new IDs one after another.
func BenchmarkLedgerNewID(b *testing.B) {
	for _, m := range modes {
		b.Run(m.name, func(b *testing.B) {
			l := fullOfGonePods(b, m.opts...)
			flushes0 := l.flushes
			claim := make([]time.Duration, 0, b.N)
			var start []time.Duration
			ctx := context.Background()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				pod := fmt.Sprintf("pod-%d", i)
				t0 := time.Now()
				if err := l.Claim(fmt.Sprintf("%032x", i), Holder{Pod: pod}); err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				claim = append(claim, t1.Sub(t0))
				if m.start {
					if err := l.SyncPod(ctx, pod); err != nil {
						b.Fatal(err)
					}
					start = append(start, time.Since(t1))
				}
				l.Stopped(pod, "")
			}
			b.StopTimer()
			percentiles(b, "claim", claim)
			percentiles(b, "start", start)
			fsyncs(b, l, flushes0, b.N)
		})
	}
}

// BenchmarkLedgerNewIDParallel claims new IDs from concurrent goroutines
// (b.RunParallel: GOMAXPROCS × 4; vary with -cpu), as CreateContainers of
// pods starting together would if the runtime sent them concurrently
// (NRI v0.12's adaptation sends one plugin call at a time).
func BenchmarkLedgerNewIDParallel(b *testing.B) {
	for _, m := range modes {
		b.Run(m.name, func(b *testing.B) {
			l := fullOfGonePods(b, m.opts...)
			flushes0 := l.flushes
			var (
				next         atomic.Int64
				mu           sync.Mutex
				claim, start []time.Duration
			)
			ctx := context.Background()
			b.SetParallelism(4)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				var c, s []time.Duration
				for pb.Next() {
					i := next.Add(1)
					pod := fmt.Sprintf("pod-%d", i)
					t0 := time.Now()
					if err := l.Claim(fmt.Sprintf("%032x", i), Holder{Pod: pod}); err != nil {
						b.Error(err)
						return
					}
					t1 := time.Now()
					c = append(c, t1.Sub(t0))
					if m.start {
						if err := l.SyncPod(ctx, pod); err != nil {
							b.Error(err)
							return
						}
						s = append(s, time.Since(t1))
					}
					l.Stopped(pod, "")
				}
				mu.Lock()
				claim, start = append(claim, c...), append(start, s...)
				mu.Unlock()
			})
			b.StopTimer()
			percentiles(b, "claim", claim)
			percentiles(b, "start", start)
			fsyncs(b, l, flushes0, len(claim))
		})
	}
}

// BenchmarkFlushFloor is the disk's part alone, for comparison: 200-byte
// durable writes with no ledger, appended and fsynced (the previous
// layout), or written in place into a zero-filled file and fdatasynced
// (the log's).
func BenchmarkFlushFloor(b *testing.B) {
	rec := make([]byte, 200)
	for i := range rec {
		rec[i] = 'x'
	}
	for _, inPlace := range []bool{false, true} {
		name := "append+fsync"
		if inPlace {
			name = "inplace+fdatasync"
		}
		b.Run(name, func(b *testing.B) {
			f, err := os.Create(filepath.Join(b.TempDir(), "floor"))
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			if inPlace {
				if _, err := f.Write(make([]byte, walSize)); err != nil {
					b.Fatal(err)
				}
				if err := f.Sync(); err != nil {
					b.Fatal(err)
				}
			}
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				off := int64(i*len(rec)) % (walSize - int64(len(rec)))
				if inPlace {
					_, err = f.WriteAt(rec, off)
					if err == nil {
						err = unix.Fdatasync(int(f.Fd()))
					}
				} else {
					_, err = f.Write(rec)
					if err == nil {
						err = f.Sync()
					}
				}
				if err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
			}
			b.StopTimer()
			percentiles(b, "write", lat)
		})
	}
}

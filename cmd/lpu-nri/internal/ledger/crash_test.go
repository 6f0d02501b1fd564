package ledger

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// The crash tests run this test binary again as a child that claims IDs
// in a ledger and is SIGKILLed, by itself at a named step of a commit or a
// compaction, or by the parent at a moment of its choosing; the parent
// then opens the ledger and checks that every ID the child was told was
// claimed (Claim returned nil) is still refused to another pod.

const (
	envDir    = "LEDGER_CRASH_DIR"
	envStep   = "LEDGER_CRASH_STEP"   // testHook step to die at
	envAt     = "LEDGER_CRASH_AT"     // after this many claims
	envStrict = "LEDGER_CRASH_STRICT" // SyncOnClaim
	envWorker = "LEDGER_CRASH_WORKERS"
)

// TestCrashChild is the child; it does nothing in a normal run.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv(envDir)
	if dir == "" {
		t.Skip("only run by the crash tests")
	}
	at, _ := strconv.Atoi(os.Getenv(envAt))
	workers, _ := strconv.Atoi(os.Getenv(envWorker))
	var opts []Option
	if os.Getenv(envStrict) != "" {
		opts = append(opts, SyncOnClaim())
	}
	l, err := Open(dir, opts...)
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(2)
	}
	var (
		mu    sync.Mutex
		count atomic.Int64
	)
	step := os.Getenv(envStep)
	testHook = func(s string) {
		if s == step && count.Load() >= int64(at) {
			if err := syscall.Kill(os.Getpid(), syscall.SIGKILL); err != nil {
				os.Exit(4)
			}
			select {} // the signal is on its way
		}
	}
	if step == "snapshot-written" || step == "wal-created" {
		l.mu.Lock()
		l.batches = compactAfter - at // the claim after at compacts
		l.mu.Unlock()
	}
	var wg sync.WaitGroup
	for w := range max(workers, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				id := fmt.Sprintf("%08x%024x", w, i)
				pod := fmt.Sprintf("pod-%d-%d", w, i)
				if err := l.Claim(id, Holder{Pod: pod}); err != nil {
					fmt.Println("claim:", err)
					os.Exit(2)
				}
				mu.Lock()
				if count.Add(1) > 20000 {
					fmt.Println("never killed")
					os.Exit(3)
				}
				fmt.Printf("claimed %s %s\n", id, pod) // unbuffered: the parent has it once Claim returned
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
}

// crashChild runs the child with env until it is killed (by itself, or by
// kill once it has reported n claims, n > 0) and returns the claims it
// reported, ID to pod.
func crashChild(t *testing.T, dir string, env []string, n int) map[string]string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), append(env, envDir+"="+dir)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	claimed := map[string]string{}
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 || f[0] != "claimed" {
			t.Errorf("child: %s", sc.Text())
			continue
		}
		claimed[f[1]] = f[2]
		if n > 0 && len(claimed) == n {
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Errorf("kill the child: %v", err)
			}
		}
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child ended with %v, want SIGKILL", err)
	}
	return claimed
}

// checkClaims opens dir after the crash and checks every claimed ID.
func checkClaims(t *testing.T, dir string, claimed map[string]string) {
	t.Helper()
	if len(claimed) == 0 {
		t.Fatal("the child claimed nothing before it died")
	}
	l, err := Open(dir)
	if err != nil {
		t.Fatalf("reopen after the crash: %v", err)
	}
	defer l.Close()
	for id, pod := range claimed {
		if err := l.Claim(id, Holder{Pod: "replayer"}); !errors.Is(err, ErrOtherPod) {
			t.Fatalf("claimed ID %s after the crash: %v, want ErrOtherPod", id, err)
		}
		if err := l.Claim(id, Holder{Pod: pod}); err != nil {
			t.Fatalf("claimed ID %s by its own pod after the crash: %v", id, err)
		}
	}
}

// TestCrashBetweenSteps kills the child at each step of a commit and of
// a compaction, in both durability modes.
func TestCrashBetweenSteps(t *testing.T) {
	for _, step := range []string{"written", "wal-created", "snapshot-written"} {
		for _, strict := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/strict=%v", step, strict), func(t *testing.T) {
				dir := t.TempDir()
				env := []string{envStep + "=" + step, envAt + "=5"}
				if strict {
					env = append(env, envStrict+"=1")
				}
				claimed := crashChild(t, dir, env, 0)
				if len(claimed) != 5 {
					t.Errorf("child claimed %d before the step, want 5", len(claimed))
				}
				checkClaims(t, dir, claimed)
				matches, _ := filepath.Glob(filepath.Join(dir, ".*.tmp"))
				if len(matches) != 0 {
					t.Errorf("temp files left after reopen: %v", matches)
				}
			})
		}
	}
}

// TestCrashMidWrite kills a child with four claiming goroutines at an
// arbitrary point, over and over on the same ledger (each reopen follows
// a crash), so the kill lands inside writes, syncs and compactions.
func TestCrashMidWrite(t *testing.T) {
	dir := t.TempDir()
	all := map[string]string{}
	for round := range 4 {
		claimed := crashChild(t, dir, []string{envWorker + "=4"}, 50+round*37)
		for id, pod := range claimed {
			if old, ok := all[id]; ok && old != pod {
				t.Fatalf("round %d: %s claimed for %s, earlier %s", round, id, pod, old)
			}
			all[id] = pod
		}
		checkClaims(t, dir, claimed)
	}
	checkClaims(t, dir, all)
}

// TestTornTailOnDisk: a crash in the middle of a batch's write leaves part
// of it after the last intact batch; Open ignores it (its Claim never
// returned), keeps the rest, and a new ID after that reopens.
func TestTornTailOnDisk(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir)
	must(t, err)
	must(t, l.Claim(idA, Holder{Pod: "pod-1"}))
	must(t, l.Close())
	path := filepath.Join(dir, WALName)
	w := readWAL(t, dir)
	torn, err := encodeBatch([]record{{ID: idB, Pod: "pod-2", Seen: time.Now()}})
	must(t, err)
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	must(t, err)
	_, err = f.WriteAt(torn[:len(torn)/2], int64(w.end))
	must(t, err)
	must(t, f.Close())
	// The reader's view of it first.
	data, err := os.ReadFile(path)
	must(t, err)
	if got, err := parseWAL(data); err != nil || !got.torn || len(got.recs) != 1 {
		t.Fatalf("parse: %+v, %v; want one record and a torn tail", got, err)
	}
	l, err = Open(dir)
	must(t, err)
	if err := l.Claim(idA, Holder{Pod: "pod-9"}); !errors.Is(err, ErrOtherPod) {
		t.Errorf("the intact record was lost: %v", err)
	}
	if err := l.Claim(idB, Holder{Pod: "pod-3"}); err != nil {
		t.Errorf("the torn record was applied: %v", err)
	}
	must(t, l.Close())
	if _, err := Open(dir); err != nil {
		t.Errorf("reopen: %v", err)
	}
}

// TestSyncPod: in the default mode Claim returns before the fdatasync;
// SyncPod returns once the pod's record is durable, at once for a pod
// without records. When the fdatasync fails and the compaction that would
// repair it fails too, SyncPod refuses; once a compaction succeeds, the
// record is durable and SyncPod passes.
func TestSyncPod(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir)
	must(t, err)
	ctx := context.Background()
	must(t, l.SyncPod(ctx, "nobody"))
	must(t, l.Claim(idA, Holder{Pod: "pod-1"}))
	must(t, l.SyncPod(ctx, "pod-1"))
	l.mu.Lock()
	if l.entries[idA].seq == 0 || l.entries[idA].seq > l.synced {
		t.Errorf("SyncPod returned before the record was synced: seq %d, synced %d", l.entries[idA].seq, l.synced)
	}
	l.mu.Unlock()

	// The next batch is written, then its log breaks before the fdatasync,
	// and a new log cannot be made.
	t.Cleanup(func() { testHook = nil })
	testHook = func(step string) {
		if step == "written" {
			l.wal.Close()
			l.dir = filepath.Join(dir, "missing")
		}
	}
	must(t, l.Claim(idB, Holder{Pod: "pod-2"})) // written: the process may crash, the node may not
	testHook = nil
	tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := l.SyncPod(tctx, "pod-2"); err == nil {
		t.Fatal("SyncPod passed a record whose sync and repair failed")
	}
	if err := l.Claim(idB, Holder{Pod: "pod-3"}); !errors.Is(err, ErrOtherPod) {
		t.Errorf("the unsynced ID is open to another pod: %v", err)
	}
	must(t, l.SyncPod(ctx, "pod-1")) // durable before
	l.mu.Lock()
	l.dir = dir
	l.mu.Unlock()
	must(t, l.SyncPod(ctx, "pod-2"))
	must(t, l.Close())
	re, err := Open(dir)
	must(t, err)
	if err := re.Claim(idB, Holder{Pod: "pod-3"}); !errors.Is(err, ErrOtherPod) {
		t.Errorf("after the repair and a reopen: %v", err)
	}
}

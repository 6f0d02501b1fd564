package driver

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/hyperaccel/lpu-node/cmd/lpu-dra/internal/state"
	checkpoint "github.com/hyperaccel/lpu-node/internal/dracheckpoint"
	"github.com/hyperaccel/lpu-node/internal/health/healthtest"
	"github.com/hyperaccel/lpu-node/pkg/inject"
)

// second starts another driver on e's directories, as the new pod of a
// rolling update does while the old one still serves.
func (e *env) second(holder string) *Driver {
	e.t.Helper()
	d, err := New(e.devices, Options{NodeName: node, StateDir: e.stateDir, CDIDir: e.cdiDir, Holder: holder,
		Inject: inject.Options{Mounts: []inject.Mount{{HostPath: "/usr/lib/lpu"}}}, ArcSizes: e.arcSizes, Metrics: NewMetrics(node),
		FollowInterval: 10 * time.Millisecond})
	if err != nil {
		e.t.Fatal(err)
	}
	return d
}

func prepareOn(t *testing.T, d *Driver, c *resourceapi.ResourceClaim) kubeletplugin.PrepareResult {
	t.Helper()
	res, err := d.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{c})
	if err != nil {
		t.Fatal(err)
	}
	return res[c.UID]
}

func unprepareOn(t *testing.T, d *Driver, uid string) error {
	t.Helper()
	res, err := d.UnprepareResourceClaims(context.Background(), []kubeletplugin.NamespacedObject{{UID: types.UID(uid)}})
	if err != nil {
		t.Fatal(err)
	}
	return res[types.UID(uid)]
}

// The new instance starts while the old one serves; each then sees what
// the other prepared and unprepared since, never its own stale copy.
func TestTwoInstancesSeeEachOther(t *testing.T) {
	e := newEnv(t, healthtest.New(t, healthtest.Ring(8)))
	old, cur := e.d, e.second("pod-new")
	cur.Heal()
	if r := prepareOn(t, old, claim("u1", arc(0, 4))); r.Err != nil {
		t.Fatal(r.Err)
	}
	// The new instance loaded the checkpoint before u1: a stale copy
	// would hand u1's LPUs out again.
	r := prepareOn(t, cur, claim("u2", arc(2, 4)))
	if r.Err == nil || !strings.Contains(r.Err.Error(), "held by claim default/claim-u1") {
		t.Fatalf("the new instance prepared over the old one's claim: %v", r.Err)
	}
	// The kubelet may unprepare through the other instance.
	if err := unprepareOn(t, cur, "u1"); err != nil {
		t.Fatal(err)
	}
	if got := old.Prepared(); len(got) != 0 {
		t.Fatalf("the old instance still sees %v after the new one unprepared it", got)
	}
	if r := prepareOn(t, old, claim("u3", arc(2, 4))); r.Err != nil {
		t.Fatalf("the old instance refused LPUs the new one freed: %v", r.Err)
	}
	// A Prepare repeated on the other instance answers from the checkpoint.
	if r := prepareOn(t, cur, claim("u3", arc(2, 4))); r.Err != nil || len(r.Devices) != 1 {
		t.Fatalf("repeated Prepare on the other instance: %+v", r)
	}
	if held := cur.state.Current().Held(); !slices.Equal(held, []string{"lpu2", "lpu3", "lpu4", "lpu5"}) {
		t.Fatalf("the new instance publishes held %v", held)
	}
	// Heal on either side keeps the other's spec.
	old.Heal()
	cur.Heal()
	if _, err := os.Stat(filepath.Join(e.cdiDir, state.SpecFile("u3"))); err != nil {
		t.Fatalf("heal removed a prepared claim's spec: %v", err)
	}
}

// The other instance's publisher republishes once this one saves: both
// controllers of a surge publish the same held LPUs.
func TestPublisherFollowsTheOtherInstance(t *testing.T) {
	e := newEnv(t, healthtest.New(t, healthtest.Ring(8)))
	cur := e.second("pod-new")
	rec := newRecorder()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = cur.RunPublisher(ctx, rec) }()
	defer func() { cancel(); <-done }()
	rec.wait(t, func() bool { f, _ := rec.first(4); return f == "ring0-start0-size4" })
	if r := e.prepare(claim("u1", arc(0, 4))); r.Err != nil { // on the old instance
		t.Fatal(r.Err)
	}
	rec.wait(t, func() bool { f, _ := rec.first(4); return f == "ring0-start4-size4" })
}

// Two instances on one state dir serve the kubelet at once (it may call
// either), preparing claims that compete for overlapping arcs, unpreparing
// through either, healing meanwhile: no claim is lost, no LPU is granted
// to two claims at once, and the lock was never held by both.
func TestTwoInstancesConcurrently(t *testing.T) {
	e := newEnv(t, healthtest.New(t, healthtest.Ring(8)))
	e.d = e.second("pod-old")
	drivers := []*Driver{e.d, e.second("pod-new")}
	var (
		mu      sync.Mutex
		granted = map[string]string{} // LPU → claim granted it, per the test
		live    = map[string]bool{}   // claims prepared and not unprepared
	)
	grant := func(uid string, lpus []string) error {
		mu.Lock()
		defer mu.Unlock()
		for _, id := range lpus {
			if other, ok := granted[id]; ok {
				return fmt.Errorf("%s granted to %s while %s holds it", id, uid, other)
			}
		}
		for _, id := range lpus {
			granted[id] = uid
		}
		live[uid] = true
		return nil
	}
	drop := func(uid string) { // before Unprepare: freed LPUs are never granted early
		mu.Lock()
		defer mu.Unlock()
		for id, u := range granted {
			if u == uid {
				delete(granted, id)
			}
		}
		delete(live, uid)
	}
	stop := make(chan struct{})
	healed := make(chan struct{})
	go func() { // the new pod heals at start while the old one serves
		defer close(healed)
		for {
			select {
			case <-stop:
				return
			default:
				drivers[1].Heal()
			}
		}
	}()
	var wg sync.WaitGroup
	for w := 0; w < 6; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < 15; i++ {
				uid := fmt.Sprintf("w%d-%d", w, i)
				d := drivers[(w+i)%2]
				// Overlapping arcs: a 4-arc at 0, 2 or 4 and this worker's single.
				for _, a := range []alloced{arc(2*(i%3), 4), arc(w, 1)} {
					r := prepareOn(t, d, claim(uid, a))
					if r.Err != nil {
						continue
					}
					lpus := drivers[(w+i+1)%2].Prepared()[uid].LPUs // as the other instance sees it
					if len(lpus) == 0 {
						t.Errorf("claim %s prepared on one instance is unknown to the other", uid)
						return
					}
					if err := grant(uid, lpus); err != nil {
						t.Error(err)
						return
					}
					break
				}
				if i%2 == 0 { // unprepare through the other instance
					drop(uid)
					if err := unprepareOn(t, drivers[(w+i+1)%2], uid); err != nil {
						t.Error(err)
						return
					}
				}
			}
		}(w)
	}
	wg.Wait()
	close(stop)
	<-healed
	st, err := checkpoint.Load(e.stateDir)
	if err != nil {
		t.Fatal(err)
	}
	var want, got []string
	for uid := range live {
		want = append(want, uid)
	}
	for uid, c := range st.Claims {
		got = append(got, uid)
		if _, err := os.Stat(filepath.Join(e.cdiDir, c.SpecName)); err != nil {
			t.Errorf("claim %s is prepared but its CDI spec is gone: %v", uid, err)
		}
	}
	slices.Sort(want)
	slices.Sort(got)
	if len(want) == 0 || !slices.Equal(got, want) {
		t.Fatalf("checkpoint holds %v, the instances prepared and kept %v", got, want)
	}
	if entries, _ := os.ReadDir(e.cdiDir); len(entries) != len(st.Claims) {
		t.Fatalf("cdi dir holds %d specs for %d claims", len(entries), len(st.Claims))
	}
	assertJournal(t, e.stateDir, "pod-old", "pod-new")
}

// assertJournal checks the lock journal: no two holds overlap, and each
// holder held it.
func assertJournal(t *testing.T, dir string, holders ...string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, checkpoint.JournalName))
	if err != nil {
		t.Fatal(err)
	}
	recs, err := checkpoint.ParseJournal(data)
	if err != nil {
		t.Fatal(err)
	}
	if a, b, ok := checkpoint.Overlap(recs); ok {
		t.Fatalf("the lock was held twice at once: %v and %v", a, b)
	}
	by := map[string]int{}
	for _, r := range recs {
		by[r.Holder]++
	}
	for _, h := range holders {
		if by[h] == 0 {
			t.Errorf("holder %s never in the journal (%v)", h, by)
		}
	}
}

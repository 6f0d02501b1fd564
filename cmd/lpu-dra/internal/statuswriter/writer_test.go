package statuswriter

import (
	"slices"
	"testing"
	"time"

	"github.com/hyperaccel/lpu-node/internal/daemontest"
	checkpoint "github.com/hyperaccel/lpu-node/internal/dracheckpoint"
	"github.com/hyperaccel/lpu-node/internal/health/healthtest"
	"github.com/hyperaccel/lpu-node/pkg/claimstatus"
	"github.com/hyperaccel/lpu-node/pkg/inject"
)

const node = "node-a"

// A wrap-around arc's entry names its LPUs in ring order and their nodes.
func TestStatusEntries(t *testing.T) {
	snap, _ := healthtest.New(t, healthtest.Ring(8)).Snapshot()
	devs := []checkpoint.Device{{Request: "lpus", Pool: node, Device: "ring0-start7-size2"}, {Request: "lpus", Pool: node, Device: "ring0-start2-size3"}}
	got := Entries(snap, devs, daemontest.Logger(t))
	if len(got) != 2 {
		t.Fatalf("%d entries, want 2", len(got))
	}
	for i, want := range []claimstatus.Data{
		{LPUs: []string{"lpu7", "lpu0"}, Ring: 0, Start: 7, Size: 2, DeviceNodes: []string{"/dev/lpu7", "/dev/lpu0"}},
		{LPUs: []string{"lpu2", "lpu3", "lpu4"}, Ring: 0, Start: 2, Size: 3, DeviceNodes: []string{"/dev/lpu2", "/dev/lpu3", "/dev/lpu4"}},
	} {
		e := got[i]
		if *e.Driver != inject.Driver || *e.Pool != node || *e.Device != devs[i].Device {
			t.Errorf("entry %d names %s/%s/%s", i, *e.Driver, *e.Pool, *e.Device)
		}
		d, err := claimstatus.Parse(e.Data.Raw)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(d.LPUs, want.LPUs) || !slices.Equal(d.DeviceNodes, want.DeviceNodes) || d.Start != want.Start || d.Size != want.Size {
			t.Errorf("entry %d: %+v, want %+v", i, d, want)
		}
	}
	if e := Entries(snap, []checkpoint.Device{{Pool: node, Device: "ring3-start0-size2"}}, daemontest.Logger(t)); len(e) != 0 {
		t.Errorf("an arc the node lacks got an entry: %s", e[0].Data.Raw)
	}
}

// The newest update of a claim wins: a Prepare's entries then an
// Unprepare's clear queued before the writer runs leave one clear, not a
// write.
func TestStatusQueueNewestWins(t *testing.T) {
	w := New(nil, Options{})
	snap, _ := healthtest.New(t, healthtest.Ring(8)).Snapshot()
	entries := Entries(snap, []checkpoint.Device{{Request: "lpus", Pool: node, Device: "ring0-start0-size2"}}, daemontest.Logger(t))
	w.Queue("default", "claim-u1", "u1", entries)
	if op, _ := w.next(time.Now().Add(time.Hour)); op == nil || len(op.devices) != 1 {
		t.Fatalf("after the entries: %+v", op)
	} else {
		w.Queue(op.namespace, op.name, op.uid, op.devices) // put it back
	}
	w.Queue("default", "claim-u1", "u1", nil)
	op, _ := w.next(time.Now())
	if op == nil || op.devices != nil || op.uid != "u1" {
		t.Fatalf("after the clear: %+v, want one clear of u1", op)
	}
	if op, _ := w.next(time.Now()); op != nil {
		t.Fatalf("a second update queued: %+v", op)
	}
}

func TestStatusBackoffBounded(t *testing.T) {
	w := New(nil, Options{FirstBackoff: 100 * time.Millisecond, MaxBackoff: time.Second})
	var got []time.Duration
	for a := 1; a <= 6; a++ {
		got = append(got, w.backoff(a))
	}
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, time.Second, time.Second}
	if !slices.Equal(got, want) {
		t.Fatalf("backoff %v, want %v", got, want)
	}
}

package arcslice

import (
	"slices"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/resourceslice"
)

// deviceNames lists the device names of sl in order.
func deviceNames(sl []resourceslice.Slice) []string {
	var out []string
	for _, s := range sl {
		for _, d := range s.Devices {
			out = append(out, d.Name)
		}
	}
	return out
}

// A cordoned LPU is ordered and counted exactly as an unhealthy one
// (Slices, FreeSlices and Free agree with passing it as unhealthy), but
// its arcs carry CordonTaintKey, not TaintKey; the builder it came from
// is left as it was.
func TestWithCordoned(t *testing.T) {
	inv := inventory(2, 8)
	b, err := NewBuilder(inv, Options{Sizes: []int{1, 2, 4, 8}})
	if err != nil {
		t.Fatal(err)
	}
	cordoned := map[string]bool{"lpu2": true, "lpu9": true}
	sick := map[string]bool{"lpu3": true}
	both := map[string]bool{"lpu2": true, "lpu9": true, "lpu3": true}
	held := []string{"lpu12"}
	c := b.WithCordoned(cordoned)
	if got, want := deviceNames(c.Slices(held, sick)), deviceNames(b.Slices(held, both)); !slices.Equal(got, want) {
		t.Errorf("Slices order with lpu2, lpu9 cordoned:\n%v\nwant as unhealthy:\n%v", got, want)
	}
	if got, want := deviceNames(c.FreeSlices(held, nil, sick)), deviceNames(b.FreeSlices(held, nil, both)); !slices.Equal(got, want) {
		t.Errorf("FreeSlices order with lpu2, lpu9 cordoned:\n%v\nwant as unhealthy:\n%v", got, want)
	}
	if got, want := c.Free(held, sick), b.Free(held, both); got != want {
		t.Errorf("Free with lpu2, lpu9 cordoned = %+v, want %+v", got, want)
	}
	tainted := 0
	for _, s := range c.Slices(held, sick) {
		for _, d := range s.Devices {
			a, err := ParseDeviceName(d.Name)
			if err != nil {
				t.Fatal(err)
			}
			var want []resourceapi.DeviceTaint
			ids := b.Layout().ArcIDs(a)
			if slices.Contains(ids, "lpu3") {
				want = append(want, resourceapi.DeviceTaint{Key: TaintKey, Value: "lpu3", Effect: resourceapi.DeviceTaintEffectNoSchedule})
			}
			for _, id := range ids {
				if cordoned[id] {
					want = append(want, resourceapi.DeviceTaint{Key: CordonTaintKey, Value: id, Effect: resourceapi.DeviceTaintEffectNoSchedule})
					tainted++
					break
				}
			}
			if !slices.Equal(d.Taints, want) {
				t.Errorf("%s %v: taints %v, want %v", d.Name, ids, d.Taints, want)
			}
		}
	}
	if tainted == 0 {
		t.Fatal("no arc carries the cordon taint")
	}
	for _, s := range b.Slices(nil, nil) {
		for _, d := range s.Devices {
			if len(d.Taints) > 0 {
				t.Fatalf("the original builder taints %s: %v", d.Name, d.Taints)
			}
		}
	}
	if b.WithCordoned(nil) != b {
		t.Error("WithCordoned(nil) copied the builder")
	}
}

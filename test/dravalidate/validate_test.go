package dravalidate

import (
	"fmt"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	_ "k8s.io/kubernetes/pkg/apis/resource/install"
	"k8s.io/kubernetes/pkg/apis/resource/validation"

	"github.com/hyperaccel/lpu-node/pkg/arcslice"
	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/device/devicetest"
	"github.com/hyperaccel/lpu-node/pkg/inject"
	"github.com/hyperaccel/lpu-node/test/dravalidate/dratest"
)

// inventory is devicetest.Inventory: rings × per healthy LPUs.
var inventory = devicetest.Inventory

func TestSlicesPassAPIValidation(t *testing.T) {
	for _, shape := range [][2]int{{1, 8}, {2, 8}, {1, 16}, {32, 8}, {1, 32}} {
		t.Run(fmt.Sprintf("%dx%d", shape[0], shape[1]), func(t *testing.T) {
			inv := inventory(shape[0], shape[1])
			inv.Devices[1].Health = device.Health{Reason: "test"} // taints on
			built := dratest.Build(t, inv, arcslice.Options{
				PCIeRoot: func(bus string) string { return "pci0000:" + bus[5:7] }}, []string{"lpu0"})
			node := "node-a"
			for i, s := range built {
				v1 := &resourcev1.ResourceSlice{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%02x-lpu.hyperaccel.ai-node-a-abcde", i)},
					Spec: resourcev1.ResourceSliceSpec{
						Driver:         inject.Driver,
						Pool:           resourcev1.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: int64(len(built))},
						NodeName:       &node,
						Devices:        s.Devices,
						SharedCounters: s.SharedCounters,
					},
				}
				if errs := validation.ValidateResourceSlice(dratest.Internal(t, v1)); len(errs) > 0 {
					t.Fatalf("slice %d (%d devices, %d counter sets) rejected: %v", i, len(s.Devices), len(s.SharedCounters), errs.ToAggregate())
				}
			}
		})
	}
}

// The real validation rejects what Build refuses to make: a counter set of
// 33 counters. This proves the test above can fail.
func TestValidationRejectsOversizedCounterSet(t *testing.T) {
	node := "node-a"
	counters := map[string]resourcev1.Counter{}
	for i := 0; i < 33; i++ {
		counters[device.ID(i)] = resourcev1.Counter{}
	}
	v1 := &resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "x"},
		Spec: resourcev1.ResourceSliceSpec{Driver: inject.Driver, NodeName: &node,
			Pool:           resourcev1.ResourcePool{Name: node, ResourceSliceCount: 1},
			SharedCounters: []resourcev1.CounterSet{{Name: "ring0", Counters: counters}}},
	}
	if errs := validation.ValidateResourceSlice(dratest.Internal(t, v1)); len(errs) == 0 {
		t.Fatal("a 33-counter set passed validation")
	}
}

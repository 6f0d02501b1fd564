package alloc_test

import (
	"fmt"

	"github.com/hyperaccel/lpu-node/pkg/alloc"
)

func Example() {
	l, err := alloc.NewLayout([][]string{{"lpu0", "lpu1", "lpu2", "lpu3", "lpu4", "lpu5", "lpu6", "lpu7"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	// lpu2, lpu3 and lpu4 are taken: the free arc is 5-6-7-0-1.
	fmt.Println(l.Preferred([]string{"lpu0", "lpu1", "lpu5", "lpu6", "lpu7"}, nil, 3))
	// Must include lpu0: 0-1 keeps 5-6-7 whole, 7-0 would not.
	fmt.Println(l.Preferred([]string{"lpu0", "lpu1", "lpu5", "lpu6", "lpu7"}, []string{"lpu0"}, 2))

	p, _ := l.Check([]string{"lpu1", "lpu7", "lpu0"})
	fmt.Println(p.IDs, p.Contiguous)
	p, _ = l.Check([]string{"lpu0", "lpu3", "lpu2"})
	fmt.Println(p.IDs, p.Contiguous, p.Reason)
	fmt.Println(l.LargestFreeArc([]string{"lpu0", "lpu1", "lpu5", "lpu6", "lpu7"}))
	// Output:
	// [lpu5 lpu6 lpu7]
	// [lpu0 lpu1]
	// [lpu7 lpu0 lpu1] true
	// [lpu0 lpu2 lpu3] false not ring neighbours: lpu0,lpu2,lpu3
	// [5]
}

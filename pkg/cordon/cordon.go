// Package cordon owns the contract of a cordoned LPU: an LPU taken out of
// service by an operator while the rest of its node keeps serving. The
// cordoned LPUs of a node are the Node annotation Annotation, a
// comma-separated list of LPU IDs ("lpu3,lpu5"), which survives daemon
// restarts because it lives on the Node. Format writes it sorted by ID
// number and without duplicates; Parse reads it back.
//
// A Watcher follows the annotation on the daemon's own Node. A malformed
// value fails closed: the Watcher keeps the last good set, adds every
// well-formed entry of the bad value to it (so "lpu3,lpuX" still cordons
// lpu3) and logs an error naming the value; nothing is ever uncordoned by
// a value that does not parse. Until it has read the Node once, Known is
// false and a caller treats every LPU as cordoned.
package cordon

import (
	"fmt"
	"slices"
	"strings"

	"github.com/hyperaccel/lpu-node/pkg/device"
	"github.com/hyperaccel/lpu-node/pkg/inject"
)

// Annotation is the Node annotation listing the node's cordoned LPUs.
const Annotation = inject.Driver + "/cordoned"

// maxValue bounds the annotation value Parse reads: 65536 IDs of up to
// eight bytes with their commas fit, so a longer value is not ours.
const maxValue = 1 << 20

// Parse reads an annotation value: LPU IDs in device.ID form ("lpu<N>",
// no leading zeros), separated by commas, spaces around an entry allowed.
// An empty value is no cordoned LPU. It returns the IDs sorted by number
// without duplicates; on a malformed entry it returns the well-formed ones
// as well, with an error naming the first bad entry.
func Parse(value string) ([]string, error) {
	if len(value) > maxValue {
		return nil, fmt.Errorf("cordoned LPUs: value of %d bytes, want at most %d", len(value), maxValue)
	}
	if strings.TrimSpace(value) == "" {
		return nil, nil
	}
	var nums []int
	var bad error
	for entry := range strings.SplitSeq(value, ",") {
		id := strings.TrimSpace(entry)
		n, err := device.ParseID(id)
		if err == nil && device.ID(n) != id {
			err = fmt.Errorf("device id %q: want %s%d", id, device.IDPrefix, n)
		}
		if err != nil {
			if bad == nil {
				bad = fmt.Errorf("cordoned LPUs: entry %q: %w", clip(id), err)
			}
			continue
		}
		nums = append(nums, n)
	}
	return ids(nums), bad
}

// Format writes ids as an annotation value: sorted by ID number, without
// duplicates. IDs not in device.ID form are an error naming the first.
func Format(list []string) (string, error) {
	nums := make([]int, 0, len(list))
	for _, id := range list {
		n, err := device.ParseID(id)
		if err != nil || device.ID(n) != id {
			return "", fmt.Errorf("cordoned LPUs: %q is not an LPU ID (want %sN)", clip(id), device.IDPrefix)
		}
		nums = append(nums, n)
	}
	return strings.Join(ids(nums), ","), nil
}

// ids returns the IDs of nums, sorted and de-duplicated; nil when empty.
func ids(nums []int) []string {
	if len(nums) == 0 {
		return nil
	}
	slices.Sort(nums)
	nums = slices.Compact(nums)
	out := make([]string, len(nums))
	for i, n := range nums {
		out[i] = device.ID(n)
	}
	return out
}

// clip shortens s for an error message.
func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

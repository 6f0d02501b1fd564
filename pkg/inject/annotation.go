package inject

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/hyperaccel/lpu-node/pkg/device"
)

// Annotation keys of the contract between the device plugin and lpu-nri.
const (
	// AnnotationPrefix starts every key this project reserves. A pod author
	// must never be able to set one (lpu-nri refuses pod annotations with it).
	AnnotationPrefix = "lpu.hyperaccel.ai/"
	// AnnotationDevices holds the allocated IDs in ring order, arc start
	// first: "lpu7,lpu0,lpu1".
	AnnotationDevices = AnnotationPrefix + "devices"
	// AnnotationSeal holds the seal over the devices value (see
	// Key.AnnotationsWithID).
	AnnotationSeal = AnnotationPrefix + "seal"
)

// Limits of ParseIDs. A node holds far fewer LPUs; the bounds only stop a
// hostile value from costing memory or time.
const (
	MaxValueLen = 4096 // bytes of the devices annotation value
	MaxIDs      = 1024 // IDs in one value
)

// smallList is the length up to which ParseIDs finds duplicates by
// scanning instead of with a map (a node has 8-16 LPUs).
const smallList = 32

// Annotation keys that name one allocation, for tracing: the device plugin
// adds them next to the devices value and its seal.
const (
	// AnnotationAllocation holds the allocation ID: 32 lower-case hex digits
	// (16 random bytes), new for every container allocation.
	AnnotationAllocation = AnnotationPrefix + "allocation"
	// AnnotationAllocationSeal holds the seal binding the allocation ID to
	// the devices value (see Key.AnnotationsWithID).
	AnnotationAllocationSeal = AnnotationPrefix + "allocation-seal"
)

// AllocationIDLen is the length of an allocation ID in hex digits.
const AllocationIDLen = 32

// EncodeIDs renders IDs (already in ring order) as the devices annotation
// value.
func EncodeIDs(ids []string) string { return strings.Join(ids, ",") }

// ParseIDs parses a devices annotation value strictly: at most MaxValueLen
// bytes and MaxIDs elements, comma separated, each an ID of the form lpuN
// (device.ParseID), no empty elements, no whitespace, no duplicates. The
// order is kept. On success EncodeIDs(ids) == value.
func ParseIDs(value string) ([]string, error) {
	if value == "" {
		return nil, errors.New("devices value is empty")
	}
	if len(value) > MaxValueLen {
		return nil, fmt.Errorf("devices value is %d bytes, limit %d", len(value), MaxValueLen)
	}
	if n := strings.Count(value, ",") + 1; n > MaxIDs {
		return nil, fmt.Errorf("devices value has %d elements, limit %d", n, MaxIDs)
	}
	ids := strings.Split(value, ",")
	var seen map[string]int // only for long lists; short ones scan
	if len(ids) > smallList {
		seen = make(map[string]int, len(ids))
	}
	for i, elem := range ids {
		if elem == "" {
			return nil, fmt.Errorf("devices element %d is empty", i)
		}
		if _, err := device.ParseID(elem); err != nil {
			return nil, fmt.Errorf("devices element %d %q: want %sN", i, elem, device.IDPrefix)
		}
		j := -1
		if seen != nil {
			if k, dup := seen[elem]; dup {
				j = k
			}
			seen[elem] = i
		} else {
			j = slices.Index(ids[:i], elem)
		}
		if j >= 0 {
			return nil, fmt.Errorf("devices element %d %q duplicates element %d", i, elem, j)
		}
	}
	return ids, nil
}

// HasReservedKey reports the first key (in sorted order) that starts with
// AnnotationPrefix in any letter case. lpu-nri uses it on pod annotations:
// any such key there means a pod author tried to write the contract and
// creation must fail. Case does not matter because Kubernetes accepts
// "LPU.hyperaccel.ai/devices" as a key and a runtime or tool that folds
// case could read it as the contract's.
func HasReservedKey(annotations map[string]string) (key string, ok bool) {
	for k := range annotations {
		if hasPrefixFold(k, AnnotationPrefix) && (!ok || k < key) {
			key, ok = k, true
		}
	}
	return key, ok
}

// hasPrefixFold is strings.HasPrefix ignoring ASCII and Unicode case.
func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// NewAllocationID returns a fresh random allocation ID: 16 bytes from
// crypto/rand as 32 lower-case hex digits.
func NewAllocationID() string {
	var b [AllocationIDLen / 2]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand, Go 1.24+)
	return hex.EncodeToString(b[:])
}

// CheckAllocationID reports whether id is a well-formed allocation ID:
// exactly AllocationIDLen lower-case hex digits. The error names the value.
func CheckAllocationID(id string) error {
	if len(id) != AllocationIDLen {
		return fmt.Errorf("allocation ID %.40q has %d characters, want %d lower-case hex digits", id, len(id), AllocationIDLen)
	}
	for i := 0; i < len(id); i++ {
		if _, ok := lowerHex(id[i]); !ok {
			return fmt.Errorf("allocation ID %q: character %d %q is not lower-case hex", id, i, id[i])
		}
	}
	return nil
}

// lowerHex returns the value of a lower-case hex digit.
func lowerHex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

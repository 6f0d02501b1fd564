package inject

import (
	"crypto/hmac"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
)

// Annotation keys that name one allocation, for tracing: the device plugin
// adds them next to the devices value and its seal.
const (
	// AnnotationAllocation holds the allocation ID: 32 lower-case hex digits
	// (16 random bytes), new for every container allocation.
	AnnotationAllocation = AnnotationPrefix + "allocation"
	// AnnotationAllocationSeal holds the seal binding the allocation ID to
	// the devices value (see Key.SealAllocation).
	AnnotationAllocationSeal = AnnotationPrefix + "allocation-seal"
)

// AllocationIDLen is the length of an allocation ID in hex digits.
const AllocationIDLen = 32

// Allocation is what OpenAllocation reads from container annotations.
type Allocation struct {
	// IDs are the allocated device IDs in ring order, arc start first.
	IDs []string
	// ID is the allocation ID, "" for an allocation sealed before the
	// device plugin wrote allocation IDs.
	ID string
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

// AnnotationsWithID is Annotations plus the allocation ID and its seal:
// four container annotations. allocID must pass CheckAllocationID (use
// NewAllocationID); otherwise it returns an error and no annotations.
func (k *Key) AnnotationsWithID(ids []string, allocID string) (map[string]string, error) {
	if err := CheckAllocationID(allocID); err != nil {
		return nil, err
	}
	v := EncodeIDs(ids)
	return map[string]string{
		AnnotationDevices:        v,
		AnnotationSeal:           k.Seal(v),
		AnnotationAllocation:     allocID,
		AnnotationAllocationSeal: k.SealAllocation(v, allocID),
	}, nil
}

// SealAllocation returns the seal binding an allocation ID to a devices
// value: "v1:" + hex(HMAC-SHA256(key, "lpu.hyperaccel.ai/allocation=" +
// allocID + "\n" + "lpu.hyperaccel.ai/devices=" + value)). The leading key
// name keeps it apart from the devices seal; because OpenAllocation checks
// the ID's fixed length and alphabet before the MAC, the input splits into
// ID and value only one way.
func (k *Key) SealAllocation(value, allocID string) string {
	return encodeSeal(k.macAllocation(value, allocID))
}

// Constant parts of the allocation MAC input, as bytes once (io.WriteString
// on a hash copies every string it is given).
var (
	allocMACPrefix  = []byte(AnnotationAllocation + "=")
	allocMACDevices = []byte("\n" + AnnotationDevices + "=")
)

func (k *Key) macAllocation(value, allocID string) []byte {
	return k.sum(func(m hash.Hash) {
		m.Write(allocMACPrefix)
		io.WriteString(m, allocID)
		m.Write(allocMACDevices)
		io.WriteString(m, value)
	})
}

// OpenAllocation is Open plus the allocation ID. It first does exactly what
// Open does (same errors). Then:
//   - neither allocation key present: the allocation predates allocation
//     IDs (kubelet replays checkpointed annotations after an upgrade); it is
//     accepted with ID "", sealed over the devices value as before;
//   - both present: the ID must pass CheckAllocationID and its seal must
//     match the ID and the devices value under this key, else the error
//     wraps ErrBadSeal: an ID cannot be forged, nor moved to another
//     container's allocation;
//   - only one present, or allocation keys without a devices value: an
//     error wrapping ErrBadSeal.
func (k *Key) OpenAllocation(annotations map[string]string) (Allocation, error) {
	allocID, hasID := annotations[AnnotationAllocation]
	seal, hasSeal := annotations[AnnotationAllocationSeal]
	ids, err := k.Open(annotations)
	if err != nil {
		if errors.Is(err, ErrNoAllocation) && (hasID || hasSeal) {
			return Allocation{}, fmt.Errorf("%w: allocation ID annotations present without %s", ErrBadSeal, AnnotationDevices)
		}
		return Allocation{}, err
	}
	switch {
	case !hasID && !hasSeal:
		return Allocation{IDs: ids}, nil
	case !hasID:
		return Allocation{}, fmt.Errorf("%w: %s present without %s", ErrBadSeal, AnnotationAllocationSeal, AnnotationAllocation)
	case !hasSeal:
		return Allocation{}, fmt.Errorf("%w: %s missing", ErrBadSeal, AnnotationAllocationSeal)
	}
	if err := CheckAllocationID(allocID); err != nil {
		return Allocation{}, fmt.Errorf("%w: %s: %v", ErrBadSeal, AnnotationAllocation, err)
	}
	got, err := decodeSeal(seal)
	if err != nil {
		return Allocation{}, fmt.Errorf("%w: %s: %v", ErrBadSeal, AnnotationAllocationSeal, err)
	}
	value := annotations[AnnotationDevices]
	if !hmac.Equal(got[:], k.macAllocation(value, allocID)) {
		return Allocation{}, fmt.Errorf("%w: %s does not match %s %q for %s %q", ErrBadSeal,
			AnnotationAllocationSeal, AnnotationAllocation, allocID, AnnotationDevices, value)
	}
	return Allocation{IDs: ids, ID: allocID}, nil
}

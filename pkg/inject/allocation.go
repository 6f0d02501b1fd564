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
	// ID is the allocation ID; "" only for a v1 allocation sealed before
	// the device plugin wrote allocation IDs.
	ID string
	// Version is the seal version: SealV2 (node-bound, ID required) or
	// SealV1 (legacy). lpu-nri accepts SealV1 only behind its migration
	// switch.
	Version int
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

// AnnotationsWithID returns the four container annotations the device
// plugin hands to kubelet: the devices value, its v2 seal over node and
// value, the allocation ID, and the v2 allocation seal over node, ID and
// value. The key must be bound to a node (ForNode) and allocID must pass
// CheckAllocationID (use NewAllocationID); otherwise it returns an error
// and no annotations.
func (k *Key) AnnotationsWithID(ids []string, allocID string) (map[string]string, error) {
	if k.node == "" {
		return nil, errors.New("seal key has no node name: bind it with ForNode")
	}
	if err := CheckAllocationID(allocID); err != nil {
		return nil, err
	}
	v := EncodeIDs(ids)
	return map[string]string{
		AnnotationDevices:        v,
		AnnotationSeal:           encodeSeal(sealV2, k.macNode(v)),
		AnnotationAllocation:     allocID,
		AnnotationAllocationSeal: encodeSeal(sealV2, k.macNodeAllocation(v, allocID)),
	}, nil
}

// LegacyAnnotationsWithID returns the v1 four-annotation form older device
// plugins wrote (no node binding), for tests of the migration switch.
func (k *Key) LegacyAnnotationsWithID(ids []string, allocID string) (map[string]string, error) {
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

// SealAllocation returns the legacy v1 seal binding an allocation ID to a
// devices value: "v1:" + hex(HMAC-SHA256(key, "lpu.hyperaccel.ai/allocation="
// + allocID + "\n" + "lpu.hyperaccel.ai/devices=" + value)). The leading key
// name keeps it apart from the devices seal; because OpenAllocation checks
// the ID's fixed length and alphabet before the MAC, the input splits into
// ID and value only one way.
func (k *Key) SealAllocation(value, allocID string) string {
	return encodeSeal(sealV1, k.macAllocation(value, allocID))
}

// Constant parts of the MAC inputs, as bytes once (io.WriteString on a hash
// copies every string it is given). v2 inputs start with
// "lpu.hyperaccel.ai/node=" + node + "\n" and then the v1 input; a node name
// has no newline (CheckNodeName), so the input splits only one way.
var (
	allocMACPrefix  = []byte(AnnotationAllocation + "=")
	allocMACDevices = []byte("\n" + AnnotationDevices + "=")
	nodeMACPrefix   = []byte(AnnotationPrefix + "node=")
	newline         = []byte("\n")
)

func (k *Key) macAllocation(value, allocID string) []byte {
	return k.sum(func(m hash.Hash) {
		m.Write(allocMACPrefix)
		io.WriteString(m, allocID)
		m.Write(allocMACDevices)
		io.WriteString(m, value)
	})
}

func (k *Key) writeNode(m hash.Hash) {
	m.Write(nodeMACPrefix)
	io.WriteString(m, k.node)
	m.Write(newline)
}

// macNode is the v2 devices MAC: node and value.
func (k *Key) macNode(value string) []byte {
	return k.sum(func(m hash.Hash) {
		k.writeNode(m)
		m.Write(devicesMACPrefix)
		io.WriteString(m, value)
	})
}

// macNodeAllocation is the v2 allocation MAC: node, ID and value.
func (k *Key) macNodeAllocation(value, allocID string) []byte {
	return k.sum(func(m hash.Hash) {
		k.writeNode(m)
		m.Write(allocMACPrefix)
		io.WriteString(m, allocID)
		m.Write(allocMACDevices)
		io.WriteString(m, value)
	})
}

// OpenAllocation is Open plus the allocation ID and the seal version. It
// first does exactly what Open does (same errors). Then:
//   - a v2 devices seal requires both allocation keys, a well-formed ID and
//     a v2 allocation seal matching node, ID and value under this key;
//   - a v1 devices seal with neither allocation key is a legacy allocation
//     (ID ""); with both, the allocation seal must be v1 and match;
//   - a mix of versions, only one allocation key, or allocation keys
//     without a devices value: an error wrapping ErrBadSeal.
//
// An ID cannot be forged, nor moved to another container's allocation, nor
// (v2) to another node. Whether a v1 allocation is acceptable is the
// caller's policy (Allocation.Version).
func (k *Key) OpenAllocation(annotations map[string]string) (Allocation, error) {
	allocID, hasID := annotations[AnnotationAllocation]
	seal, hasSeal := annotations[AnnotationAllocationSeal]
	ids, version, err := k.open(annotations)
	if err != nil {
		if errors.Is(err, ErrNoAllocation) && (hasID || hasSeal) {
			return Allocation{}, fmt.Errorf("%w: allocation ID annotations present without %s", ErrBadSeal, AnnotationDevices)
		}
		return Allocation{}, err
	}
	switch {
	case !hasID && !hasSeal && version == SealV1:
		return Allocation{IDs: ids, Version: SealV1}, nil
	case !hasID:
		return Allocation{}, fmt.Errorf("%w: %s missing", ErrBadSeal, AnnotationAllocation)
	case !hasSeal:
		return Allocation{}, fmt.Errorf("%w: %s missing", ErrBadSeal, AnnotationAllocationSeal)
	}
	if err := CheckAllocationID(allocID); err != nil {
		return Allocation{}, fmt.Errorf("%w: %s: %v", ErrBadSeal, AnnotationAllocation, err)
	}
	sealVersion, got, err := decodeSeal(seal)
	if err != nil {
		return Allocation{}, fmt.Errorf("%w: %s: %v", ErrBadSeal, AnnotationAllocationSeal, err)
	}
	if sealVersion != version {
		return Allocation{}, fmt.Errorf("%w: %s is v%d but %s is v%d", ErrBadSeal, AnnotationAllocationSeal, sealVersion, AnnotationSeal, version)
	}
	value := annotations[AnnotationDevices]
	want := k.macAllocation(value, allocID)
	if version == SealV2 {
		want = k.macNodeAllocation(value, allocID)
	}
	if !hmac.Equal(got[:], want) {
		return Allocation{}, fmt.Errorf("%w: %s does not match %s %q for %s %q", ErrBadSeal,
			AnnotationAllocationSeal, AnnotationAllocation, allocID, AnnotationDevices, value)
	}
	return Allocation{IDs: ids, ID: allocID, Version: version}, nil
}

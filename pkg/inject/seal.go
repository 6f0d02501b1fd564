package inject

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"strings"
)

// Seal versions prefix every seal so the format can change without
// ambiguity: "v1:" or "v2:" followed by 64 lower-case hex digits. A v1 seal
// covers the devices value (and allocation ID) only; a v2 seal also covers
// the node name, so annotations sealed on one node do not open on another
// that shares its key (cloned images).
const (
	sealV1 = "v1:"
	sealV2 = "v2:"
)

// Seal versions as Allocation.Version reports them.
const (
	SealV1 = 1 // legacy: no node binding; the allocation ID is optional
	SealV2 = 2 // node-bound, allocation ID required
)

// Sentinel errors of Open, for errors.Is.
var (
	// ErrNoAllocation means the annotations carry no allocation at all: the
	// container holds no LPU and gets only Unallocated().
	ErrNoAllocation = errors.New("no lpu allocation annotation")
	// ErrBadSeal means the seal is missing, malformed or does not match the
	// value under this node's key.
	ErrBadSeal = errors.New("lpu allocation seal invalid")
)

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

// MAC inputs. Every value this package seals is HMAC-SHA256 under the
// node's key over one of these byte strings, and no other function builds
// one:
//
//	devices seal, v1        "lpu.hyperaccel.ai/devices=" value
//	allocation seal, v1     "lpu.hyperaccel.ai/allocation=" ID "\n" "lpu.hyperaccel.ai/devices=" value
//	either seal, v2         "lpu.hyperaccel.ai/node=" node "\n" then the v1 input
//	verified token          "lpu.hyperaccel.ai/verified=" container ID
//	fingerprint             "lpu.hyperaccel.ai/fingerprint"
//
// The leading key name keeps the uses apart. Each input splits into its
// fields one way only: a node name has no newline (CheckNodeName), and
// OpenAllocation checks the ID's fixed length and alphabet before the MAC.
// The constant parts are bytes made once (io.WriteString on a hash copies
// every string it is given).
var (
	devicesMACPrefix  = []byte(AnnotationDevices + "=")
	allocMACPrefix    = []byte(AnnotationAllocation + "=")
	allocMACDevices   = []byte("\n" + AnnotationDevices + "=")
	nodeMACPrefix     = []byte(AnnotationPrefix + "node=")
	newline           = []byte("\n")
	verifiedMACPrefix = []byte(AnnotationVerified + "=")
	fingerprintInput  = []byte(AnnotationPrefix + "fingerprint")
)

// macDevices is the devices seal's MAC of value; version SealV2 covers the
// key's node too.
func (k *Key) macDevices(version int, value string) []byte {
	return k.sum(func(m hash.Hash) {
		if version == SealV2 {
			k.writeNode(m)
		}
		m.Write(devicesMACPrefix)
		io.WriteString(m, value)
	})
}

// macAllocation is the allocation seal's MAC of ID and value; version
// SealV2 covers the key's node too.
func (k *Key) macAllocation(version int, value, allocID string) []byte {
	return k.sum(func(m hash.Hash) {
		if version == SealV2 {
			k.writeNode(m)
		}
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

// macVerified is the verified token's MAC of a container ID.
func (k *Key) macVerified(id string) []byte {
	return k.sum(func(m hash.Hash) {
		m.Write(verifiedMACPrefix)
		io.WriteString(m, id)
	})
}

// macFingerprint is the MAC Fingerprint shows a prefix of.
func (k *Key) macFingerprint() []byte {
	return k.sum(func(m hash.Hash) { m.Write(fingerprintInput) })
}

// newHash is the MAC's hash; every pooled state uses it.
var newHash = sha256.New

// sum returns the HMAC under k of what write writes. Keyed HMAC states are
// pooled: setting one up costs more than hashing a short value.
func (k *Key) sum(write func(m hash.Hash)) []byte {
	m, _ := k.macs.Get().(hash.Hash)
	if m == nil {
		m = hmac.New(newHash, k.secret[:])
	}
	m.Reset()
	write(m)
	sum := m.Sum(nil)
	k.macs.Put(m)
	return sum
}

// AnnotationsWithID returns the four container annotations the device
// plugin hands to kubelet: the devices value, its v2 seal over node and
// value, the allocation ID, and the v2 allocation seal over node, ID and
// value. The key must be bound to a node (ForNode) and allocID must pass
// CheckAllocationID (use NewAllocationID); otherwise it returns an error
// and no annotations. It is the only seal writer: the v1 form older device
// plugins wrote is made only by tests (injecttest).
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
		AnnotationSeal:           encodeSeal(sealV2, k.macDevices(SealV2, v)),
		AnnotationAllocation:     allocID,
		AnnotationAllocationSeal: encodeSeal(sealV2, k.macAllocation(SealV2, v, allocID)),
	}, nil
}

// OpenAllocation reads and verifies an allocation, with its ID and seal
// version, from container annotations. It is Open (same errors) followed
// by the allocation keys:
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
	ids, version, err := k.openDevices(annotations)
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
	if !hmac.Equal(got[:], k.macAllocation(version, value, allocID)) {
		return Allocation{}, fmt.Errorf("%w: %s does not match %s %q for %s %q", ErrBadSeal,
			AnnotationAllocationSeal, AnnotationAllocation, allocID, AnnotationDevices, value)
	}
	return Allocation{IDs: ids, ID: allocID, Version: version}, nil
}

// Open reads and verifies the devices value of an allocation from
// container annotations. It returns ErrNoAllocation when neither contract
// key is present; an error wrapping ErrBadSeal when the seal is missing,
// malformed or wrong; and a ParseIDs error when a correctly sealed value is
// still malformed. A v2 devices seal is verified against the key's node
// (ForNode); a v1 seal without one. The returned IDs are in ring order; the
// caller must still check that they exist in its own inventory. Open
// ignores the allocation ID keys; OpenAllocation reads and verifies them
// too and says which seal version was used.
func (k *Key) Open(annotations map[string]string) ([]string, error) {
	ids, _, err := k.openDevices(annotations)
	return ids, err
}

// openDevices is Open that also returns the devices seal's version: the
// seal is verified in constant time before the value is parsed.
func (k *Key) openDevices(annotations map[string]string) ([]string, int, error) {
	value, hasDevices := annotations[AnnotationDevices]
	seal, hasSeal := annotations[AnnotationSeal]
	switch {
	case !hasDevices && !hasSeal:
		return nil, 0, ErrNoAllocation
	case !hasDevices:
		return nil, 0, fmt.Errorf("%w: %s present without %s", ErrBadSeal, AnnotationSeal, AnnotationDevices)
	case !hasSeal:
		return nil, 0, fmt.Errorf("%w: %s missing", ErrBadSeal, AnnotationSeal)
	}
	if len(value) > MaxValueLen {
		return nil, 0, fmt.Errorf("%s: value is %d bytes, limit %d", AnnotationDevices, len(value), MaxValueLen)
	}
	version, got, err := decodeSeal(seal)
	if err != nil {
		return nil, 0, fmt.Errorf("%w: %s: %v", ErrBadSeal, AnnotationSeal, err)
	}
	if version == SealV2 && k.node == "" {
		return nil, 0, fmt.Errorf("%w: %s is node-bound (v2) but this key has no node name", ErrBadSeal, AnnotationSeal)
	}
	if !hmac.Equal(got[:], k.macDevices(version, value)) {
		if version == SealV2 {
			return nil, 0, fmt.Errorf("%w: %s does not match %s %q on node %q (sealed on another node, or forged)", ErrBadSeal, AnnotationSeal, AnnotationDevices, value, k.node)
		}
		return nil, 0, fmt.Errorf("%w: %s does not match %s %q", ErrBadSeal, AnnotationSeal, AnnotationDevices, value)
	}
	ids, err := ParseIDs(value)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", AnnotationDevices, err)
	}
	return ids, version, nil
}

// encodeSeal renders a MAC as version + lower-case hex.
func encodeSeal(version string, sum []byte) string {
	buf := make([]byte, len(version)+hex.EncodedLen(len(sum)))
	copy(buf, version)
	hex.Encode(buf[len(version):], sum)
	return string(buf)
}

// decodeSeal checks and decodes a seal in one pass over its digits and
// returns its version (SealV1 or SealV2).
func decodeSeal(seal string) (version int, sum [sha256.Size]byte, err error) {
	digits, ok := strings.CutPrefix(seal, sealV2)
	version = SealV2
	if !ok {
		digits, ok = strings.CutPrefix(seal, sealV1)
		version = SealV1
	}
	if !ok {
		return 0, sum, fmt.Errorf("seal %.16q...: want prefix %q or %q", seal, sealV2, sealV1)
	}
	if len(digits) != hex.EncodedLen(sha256.Size) {
		return 0, sum, fmt.Errorf("seal has %d hex digits, want %d", len(digits), hex.EncodedLen(sha256.Size))
	}
	for i := 0; i < len(digits); i++ {
		v, ok := lowerHex(digits[i])
		if !ok {
			return 0, sum, fmt.Errorf("seal digit %d %q: want lower-case hex", i, digits[i])
		}
		sum[i/2] = sum[i/2]<<4 | v
	}
	return version, sum, nil
}

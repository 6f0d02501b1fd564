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

// A seal is its version's prefix followed by 64 lower-case hex digits, so
// the format can change without ambiguity. The one version opened is v2,
// which covers the node name, so annotations sealed on one node do not open
// on another that shares its key (cloned images). The v1 form of device
// plugins before node binding covered the devices value (and allocation ID)
// only: it is refused with ErrLegacySeal.
const (
	sealV2       = "v2:"
	legacySealV1 = "v1:"
)

// Sentinel errors of Open, for errors.Is.
var (
	// ErrNoAllocation means the annotations carry no allocation at all: the
	// container holds no LPU and gets only Unallocated().
	ErrNoAllocation = errors.New("no lpu allocation annotation")
	// ErrBadSeal means the seal is missing, malformed or does not match the
	// value under this node's key.
	ErrBadSeal = errors.New("lpu allocation seal invalid")
	// ErrLegacySeal means a seal is in the v1 form (not bound to a node),
	// which no device plugin of this release writes and no opener accepts.
	// Errors wrapping it wrap ErrBadSeal too.
	ErrLegacySeal = errors.New("v1 seal (not bound to a node) no longer accepted: recreate the pod so the device plugin seals it again")
)

// Allocation is what OpenAllocation reads from container annotations.
type Allocation struct {
	// IDs are the allocated device IDs in ring order, arc start first.
	IDs []string
	// ID is the allocation ID.
	ID string
}

// MAC inputs. Every value this package seals is HMAC-SHA256 under the
// node's key over one of these byte strings, and no other function builds
// one:
//
//	devices seal            "lpu.hyperaccel.ai/node=" node "\n" "lpu.hyperaccel.ai/devices=" value
//	allocation seal         "lpu.hyperaccel.ai/node=" node "\n" "lpu.hyperaccel.ai/allocation=" ID "\n" "lpu.hyperaccel.ai/devices=" value
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

// macDevices is the devices seal's MAC of the key's node and value.
func (k *Key) macDevices(value string) []byte {
	return k.sum(func(m hash.Hash) {
		k.writeNode(m)
		m.Write(devicesMACPrefix)
		io.WriteString(m, value)
	})
}

// macAllocation is the allocation seal's MAC of the key's node, ID and
// value.
func (k *Key) macAllocation(value, allocID string) []byte {
	return k.sum(func(m hash.Hash) {
		k.writeNode(m)
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
// and no annotations. It is the only seal writer.
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
		AnnotationSeal:           encodeSeal(sealV2, k.macDevices(v)),
		AnnotationAllocation:     allocID,
		AnnotationAllocationSeal: encodeSeal(sealV2, k.macAllocation(v, allocID)),
	}, nil
}

// OpenAllocation reads and verifies an allocation, with its ID, from
// container annotations. It is Open (same errors) followed by the
// allocation keys: both are required, a well-formed ID and an allocation
// seal matching node, ID and value under this key. A missing key, a v1
// seal (also ErrLegacySeal) or allocation keys without a devices value: an
// error wrapping ErrBadSeal.
//
// An ID cannot be forged, nor moved to another container's allocation or
// to another node.
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
	case !hasID:
		return Allocation{}, fmt.Errorf("%w: %s missing", ErrBadSeal, AnnotationAllocation)
	case !hasSeal:
		return Allocation{}, fmt.Errorf("%w: %s missing", ErrBadSeal, AnnotationAllocationSeal)
	}
	if err := CheckAllocationID(allocID); err != nil {
		return Allocation{}, fmt.Errorf("%w: %s: %v", ErrBadSeal, AnnotationAllocation, err)
	}
	got, err := decodeAllocationSeal(seal)
	if err != nil {
		return Allocation{}, fmt.Errorf("%w: %s: %w", ErrBadSeal, AnnotationAllocationSeal, err)
	}
	value := annotations[AnnotationDevices]
	if !hmac.Equal(got[:], k.macAllocation(value, allocID)) {
		return Allocation{}, fmt.Errorf("%w: %s does not match %s %q for %s %q", ErrBadSeal,
			AnnotationAllocationSeal, AnnotationAllocation, allocID, AnnotationDevices, value)
	}
	return Allocation{IDs: ids, ID: allocID}, nil
}

// Open reads and verifies the devices value of an allocation from
// container annotations. It returns ErrNoAllocation when neither contract
// key is present; an error wrapping ErrBadSeal when the seal is missing,
// malformed, wrong or in the v1 form (also ErrLegacySeal); and a ParseIDs
// error when a correctly sealed value is still malformed. The seal is
// verified against the key's node (ForNode), in constant time before the
// value is parsed. The returned IDs are in ring order; the caller must
// still check that they exist in its own inventory. Open ignores the
// allocation ID keys; OpenAllocation reads and verifies them too.
func (k *Key) Open(annotations map[string]string) ([]string, error) {
	value, hasDevices := annotations[AnnotationDevices]
	seal, hasSeal := annotations[AnnotationSeal]
	switch {
	case !hasDevices && !hasSeal:
		return nil, ErrNoAllocation
	case !hasDevices:
		return nil, fmt.Errorf("%w: %s present without %s", ErrBadSeal, AnnotationSeal, AnnotationDevices)
	case !hasSeal:
		return nil, fmt.Errorf("%w: %s missing", ErrBadSeal, AnnotationSeal)
	}
	if len(value) > MaxValueLen {
		return nil, fmt.Errorf("%s: value is %d bytes, limit %d", AnnotationDevices, len(value), MaxValueLen)
	}
	got, err := decodeAllocationSeal(seal)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrBadSeal, AnnotationSeal, err)
	}
	if k.node == "" {
		return nil, fmt.Errorf("%w: %s is node-bound (v2) but this key has no node name", ErrBadSeal, AnnotationSeal)
	}
	if !hmac.Equal(got[:], k.macDevices(value)) {
		return nil, fmt.Errorf("%w: %s does not match %s %q on node %q (sealed on another node, or forged)", ErrBadSeal, AnnotationSeal, AnnotationDevices, value, k.node)
	}
	ids, err := ParseIDs(value)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", AnnotationDevices, err)
	}
	return ids, nil
}

// encodeSeal renders a MAC as version + lower-case hex.
func encodeSeal(version string, sum []byte) string {
	buf := make([]byte, len(version)+hex.EncodedLen(len(sum)))
	copy(buf, version)
	hex.Encode(buf[len(version):], sum)
	return string(buf)
}

// decodeAllocationSeal decodes a devices or allocation seal: v2, or an
// error wrapping ErrLegacySeal for the v1 form.
func decodeAllocationSeal(seal string) (sum [sha256.Size]byte, err error) {
	if strings.HasPrefix(seal, legacySealV1) {
		return sum, ErrLegacySeal
	}
	return decodeSeal(seal, sealV2)
}

// decodeSeal checks and decodes a seal with the given prefix in one pass
// over its digits.
func decodeSeal(seal, prefix string) (sum [sha256.Size]byte, err error) {
	digits, ok := strings.CutPrefix(seal, prefix)
	if !ok {
		return sum, fmt.Errorf("seal %.16q...: want prefix %q", seal, prefix)
	}
	if len(digits) != hex.EncodedLen(sha256.Size) {
		return sum, fmt.Errorf("seal has %d hex digits, want %d", len(digits), hex.EncodedLen(sha256.Size))
	}
	for i := 0; i < len(digits); i++ {
		v, ok := lowerHex(digits[i])
		if !ok {
			return sum, fmt.Errorf("seal digit %d %q: want lower-case hex", i, digits[i])
		}
		sum[i/2] = sum[i/2]<<4 | v
	}
	return sum, nil
}

package inject

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
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
	// AnnotationSeal holds the seal over the devices value (see Key.Seal).
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

// Annotations returns the legacy (v1) container annotations for ids (ring
// order, arc start first): the devices value and its v1 seal, no node
// binding and no allocation ID. The device plugin writes AnnotationsWithID;
// this form stays for tests of the migration switch (kubelet replays
// checkpoints written by older device plugins).
func (k *Key) Annotations(ids []string) map[string]string {
	v := EncodeIDs(ids)
	return map[string]string{AnnotationDevices: v, AnnotationSeal: k.Seal(v)}
}

// Seal returns the legacy v1 seal of a devices value: "v1:" +
// hex(HMAC-SHA256(key, "lpu.hyperaccel.ai/devices=" + value)). The key name
// in the MAC input separates this use from any other sealed field.
func (k *Key) Seal(value string) string {
	return encodeSeal(sealV1, k.mac(value))
}

// encodeSeal renders a MAC as version + lower-case hex.
func encodeSeal(version string, sum []byte) string {
	buf := make([]byte, len(version)+hex.EncodedLen(len(sum)))
	copy(buf, version)
	hex.Encode(buf[len(version):], sum)
	return string(buf)
}

// newHash is the MAC's hash; every pooled state uses it.
var newHash = sha256.New

// devicesMACPrefix starts the devices MAC input, as bytes once
// (io.WriteString on a hash copies every string it is given).
var devicesMACPrefix = []byte(AnnotationDevices + "=")

// mac returns the HMAC of a devices value.
func (k *Key) mac(value string) []byte {
	return k.sum(func(m hash.Hash) {
		m.Write(devicesMACPrefix)
		io.WriteString(m, value)
	})
}

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

// Open reads and verifies an allocation from container annotations. It
// returns ErrNoAllocation when neither contract key is present; an error
// wrapping ErrBadSeal when the seal is missing, malformed or wrong; and a
// ParseIDs error when a correctly sealed value is still malformed. A v2
// devices seal is verified against the key's node (ForNode); a v1 seal
// without one. The returned IDs are in ring order; the caller must still
// check that they exist in its own inventory. Open ignores the allocation
// ID keys; OpenAllocation reads and verifies them too and says which seal
// version was used.
func (k *Key) Open(annotations map[string]string) ([]string, error) {
	ids, _, err := k.open(annotations)
	return ids, err
}

// open is Open that also returns the devices seal's version.
func (k *Key) open(annotations map[string]string) ([]string, int, error) {
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
	var want []byte
	if version == SealV2 {
		if k.node == "" {
			return nil, 0, fmt.Errorf("%w: %s is node-bound (v2) but this key has no node name", ErrBadSeal, AnnotationSeal)
		}
		want = k.macNode(value)
	} else {
		want = k.mac(value)
	}
	if !hmac.Equal(got[:], want) {
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

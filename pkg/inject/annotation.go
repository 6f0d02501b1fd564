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

// sealVersion prefixes every seal so the format can change later without
// ambiguity: "v1:" followed by 64 lower-case hex digits.
const sealVersion = "v1:"

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
// AnnotationPrefix. lpu-nri uses it on pod annotations: any such key there
// means a pod author tried to write the contract and creation must fail.
func HasReservedKey(annotations map[string]string) (key string, ok bool) {
	for k := range annotations {
		if strings.HasPrefix(k, AnnotationPrefix) && (!ok || k < key) {
			key, ok = k, true
		}
	}
	return key, ok
}

// Annotations returns the container annotations the device plugin hands to
// kubelet for ids (ring order, arc start first): the devices value and its
// seal.
func (k *Key) Annotations(ids []string) map[string]string {
	v := EncodeIDs(ids)
	return map[string]string{AnnotationDevices: v, AnnotationSeal: k.Seal(v)}
}

// Seal returns the seal of a devices value: "v1:" + hex(HMAC-SHA256(key,
// "lpu.hyperaccel.ai/devices=" + value)). The key name in the MAC input
// separates this use from any future sealed field.
func (k *Key) Seal(value string) string {
	return encodeSeal(k.mac(value))
}

// encodeSeal renders a MAC as "v1:" + lower-case hex.
func encodeSeal(sum []byte) string {
	buf := make([]byte, len(sealVersion)+hex.EncodedLen(len(sum)))
	copy(buf, sealVersion)
	hex.Encode(buf[len(sealVersion):], sum)
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
// ParseIDs error when a correctly sealed value is still malformed. The
// returned IDs are in ring order; the caller must still check that they
// exist in its own inventory. Open ignores the allocation ID keys
// (AnnotationAllocation, AnnotationAllocationSeal); OpenAllocation reads
// and verifies them too.
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
	got, err := decodeSeal(seal)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrBadSeal, AnnotationSeal, err)
	}
	if !hmac.Equal(got[:], k.mac(value)) {
		return nil, fmt.Errorf("%w: %s does not match %s %q", ErrBadSeal, AnnotationSeal, AnnotationDevices, value)
	}
	ids, err := ParseIDs(value)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", AnnotationDevices, err)
	}
	return ids, nil
}

// decodeSeal checks and decodes a seal in one pass over its digits.
func decodeSeal(seal string) (sum [sha256.Size]byte, err error) {
	digits, ok := strings.CutPrefix(seal, sealVersion)
	if !ok {
		return sum, fmt.Errorf("seal %.16q...: want prefix %q", seal, sealVersion)
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

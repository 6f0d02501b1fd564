// Package injecttest is pkg/inject's test kit. It writes what no production
// code writes: the legacy v1 allocation annotations of device plugins
// before node binding, which lpu-nri refuses (inject.ErrLegacySeal); its
// tests, inject's own and the e2e's sealtool make them here to show that
// refusal. It also holds the golden tests' device sets (GoldenLayouts),
// which pkg/inject renders to CDI specs and lpu-nri's nriedit to NRI
// adjustments.
//
//	k, err := injecttest.NewKey(secret) // the node key's 32 bytes
//	ann := k.AnnotationsV1([]string{"lpu0", "lpu1"})
//	_, err = k.Open(ann) // k embeds *inject.Key: errors.Is(err, inject.ErrLegacySeal)
//
// The v1 MAC inputs are pkg/inject's without the node line (the table in
// its seal.go), written here rather than borrowed from pkg/inject, which
// no longer has them.
package injecttest

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"

	"github.com/hyperaccel/lpu-node/pkg/inject"
)

// Key is a seal key whose secret the test holds, so that besides
// everything an inject.Key does it writes the v1 form.
type Key struct {
	*inject.Key
	secret []byte
}

// NewKey returns a key with the given secret (inject.KeySize bytes): the
// same secret as inject.NewKey(secret) or a seal.key file holding it.
func NewKey(secret []byte) (*Key, error) {
	k, err := inject.NewKey(secret)
	if err != nil {
		return nil, err
	}
	return &Key{Key: k, secret: append([]byte(nil), secret...)}, nil
}

// ForNode is inject.Key.ForNode keeping the v1 writers: the bound key's v2
// seals cover node, its v1 seals (which cover no node) are unchanged.
func (k *Key) ForNode(node string) (*Key, error) {
	b, err := k.Key.ForNode(node)
	if err != nil {
		return nil, err
	}
	return &Key{Key: b, secret: k.secret}, nil
}

// SealV1 returns the v1 seal of a devices value: "v1:" +
// hex(HMAC-SHA256(key, "lpu.hyperaccel.ai/devices=" + value)).
func (k *Key) SealV1(value string) string {
	return k.v1(inject.AnnotationDevices + "=" + value)
}

// SealAllocationV1 returns the v1 seal binding an allocation ID to a
// devices value: "v1:" + hex(HMAC-SHA256(key,
// "lpu.hyperaccel.ai/allocation=" + allocID + "\n" +
// "lpu.hyperaccel.ai/devices=" + value)).
func (k *Key) SealAllocationV1(value, allocID string) string {
	return k.v1(inject.AnnotationAllocation + "=" + allocID + "\n" + inject.AnnotationDevices + "=" + value)
}

// AnnotationsV1 returns the oldest form: the devices value of ids (ring
// order, arc start first) and its v1 seal, no node and no allocation ID.
func (k *Key) AnnotationsV1(ids []string) map[string]string {
	v := inject.EncodeIDs(ids)
	return map[string]string{inject.AnnotationDevices: v, inject.AnnotationSeal: k.SealV1(v)}
}

// AnnotationsV1WithID returns the v1 four-annotation form: AnnotationsV1
// plus allocID and its v1 allocation seal. allocID must pass
// inject.CheckAllocationID; otherwise it returns an error and no
// annotations.
func (k *Key) AnnotationsV1WithID(ids []string, allocID string) (map[string]string, error) {
	if err := inject.CheckAllocationID(allocID); err != nil {
		return nil, err
	}
	ann := k.AnnotationsV1(ids)
	ann[inject.AnnotationAllocation] = allocID
	ann[inject.AnnotationAllocationSeal] = k.SealAllocationV1(ann[inject.AnnotationDevices], allocID)
	return ann, nil
}

func (k *Key) v1(input string) string {
	m := hmac.New(sha256.New, k.secret)
	m.Write([]byte(input))
	return "v1:" + hex.EncodeToString(m.Sum(nil))
}

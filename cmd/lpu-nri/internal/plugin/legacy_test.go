package plugin

import (
	"slices"
	"testing"

	"github.com/hyperaccel/lpu-node/pkg/inject"
	"github.com/hyperaccel/lpu-node/pkg/inject/injecttest"
)

// legacyKey is testKey(t, b) as a writer of the v1 form, which only
// device plugins before node binding wrote (security.acceptLegacySeals).
func legacyKey(t testing.TB, b byte) *injecttest.Key {
	t.Helper()
	k, err := injecttest.NewKey(slices.Repeat([]byte{b}, inject.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	if k, err = k.ForNode(testNode); err != nil {
		t.Fatal(err)
	}
	return k
}

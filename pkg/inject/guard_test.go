package inject_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/hyperaccel/lpu-node/pkg/inject"
	"github.com/hyperaccel/lpu-node/pkg/inject/injecttest"
)

// TestVerifiedToken: the runtime guard's proof is bound to the container
// ID and the key, and LoadKey never makes a key.
func TestVerifiedToken(t *testing.T) {
	dir := t.TempDir()
	if _, err := inject.LoadKey(dir); err == nil {
		t.Fatal("LoadKey of a dir without a key succeeded")
	}
	if _, err := os.Stat(filepath.Join(dir, inject.KeyFileName)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("LoadKey created a key: %v", err)
	}
	made, err := inject.LoadOrCreateKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	k, err := inject.LoadKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	bound, err := made.ForNode("n1")
	if err != nil {
		t.Fatal(err)
	}
	tok := bound.VerifiedToken("c1")
	if tok != k.VerifiedToken("c1") {
		t.Fatal("the token depends on the node binding; the hook has no node name")
	}
	// The same secret writes a v1 devices seal over the same text: it
	// must not pass for the token (the MAC inputs differ in their key name).
	raw, err := os.ReadFile(filepath.Join(dir, inject.KeyFileName))
	if err != nil {
		t.Fatal(err)
	}
	v1, err := injecttest.NewKey(raw)
	if err != nil {
		t.Fatal(err)
	}
	if tok == k.VerifiedToken("c2") {
		t.Fatal("two containers share a token")
	}
	if err := k.CheckVerified("c1", map[string]string{inject.AnnotationVerified: tok}); err != nil {
		t.Fatalf("own token refused: %v", err)
	}
	for name, ann := range map[string]map[string]string{
		"none":          {},
		"other ID":      {inject.AnnotationVerified: k.VerifiedToken("c2")},
		"devices seal":  {inject.AnnotationVerified: v1.SealV1("c1")},
		"truncated":     {inject.AnnotationVerified: tok[:len(tok)-2]},
		"other version": {inject.AnnotationVerified: "v2:" + tok[3:]},
	} {
		if err := k.CheckVerified("c1", ann); !errors.Is(err, inject.ErrNotVerified) {
			t.Errorf("%s: CheckVerified = %v, want ErrNotVerified", name, err)
		}
	}
}

package inject

import (
	"crypto/hmac"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"

	"github.com/hyperaccel/lpu-node/internal/statedir"
)

// The runtime guard's names: the CDI device the device plugin requests for
// every LPU container (security.runtimeGuard), and the annotation lpu-nri's
// adjustment adds to a container it verified, which the device's hook
// checks before the container starts.
const (
	// GuardKind is the CDI kind of the guard device. It is not CDIKind:
	// the guard holds a hook and no device node.
	GuardKind = "hyperaccel.ai/lpu-guard"
	// GuardDeviceName names the one device of GuardKind.
	GuardDeviceName = "verified"
	// GuardDevice is the guard's fully qualified CDI device name.
	GuardDevice = GuardKind + "=" + GuardDeviceName
	// AnnotationVerified holds lpu-nri's proof that it verified this
	// container: VerifiedToken of the container's ID.
	AnnotationVerified = AnnotationPrefix + "verified"
)

// verifiedV1 prefixes the verified token: its own format's version, apart
// from the allocation seals'.
const verifiedV1 = "v1:"

// ErrNotVerified marks a container that carries no valid proof of
// lpu-nri's verification.
var ErrNotVerified = errors.New("container not verified by lpu-nri")

// maxContainerIDLen bounds a container ID (runtimes use 64 hex digits).
const maxContainerIDLen = 1024

// VerifiedToken returns the value lpu-nri puts in AnnotationVerified for
// the container with runtime ID id: "v1:" and the HMAC of the ID under the
// node's key. The runtime picks the ID when it creates the container, so a
// token cannot be made ahead or carried over to another container; only
// lpu-nri's applied adjustment puts it in the container's spec.
func (k *Key) VerifiedToken(id string) string {
	return encodeSeal(verifiedV1, k.macVerified(id))
}

// CheckVerified returns nil when annotations hold the valid token for the
// container id, else an error wrapping ErrNotVerified that says why.
func (k *Key) CheckVerified(id string, annotations map[string]string) error {
	if id == "" || len(id) > maxContainerIDLen || strings.ContainsRune(id, 0) {
		return fmt.Errorf("%w: container ID %.64q is empty, too long or not text", ErrNotVerified, id)
	}
	tok, ok := annotations[AnnotationVerified]
	if !ok {
		return fmt.Errorf("%w: no %s annotation (lpu-nri did not adjust it: down, frozen or timed out by the runtime)", ErrNotVerified, AnnotationVerified)
	}
	got, err := decodeSeal(tok, verifiedV1)
	if err != nil {
		return fmt.Errorf("%w: %s is malformed", ErrNotVerified, AnnotationVerified)
	}
	if !hmac.Equal(got[:], k.macVerified(id)) {
		return fmt.Errorf("%w: %s is not this node's proof for container %.12s (forged or copied from another container)", ErrNotVerified, AnnotationVerified, id)
	}
	return nil
}

// LoadKey loads <stateDir>/seal.key with LoadOrCreateKey's checks but
// never creates it: for readers such as the guard hook, which must fail
// rather than make a key no daemon uses.
func LoadKey(stateDir string) (*Key, error) {
	if stateDir == "" {
		return nil, errors.New("seal key: state dir is empty")
	}
	dir, err := statedir.Check(stateDir)
	if err != nil {
		return nil, err
	}
	k, err := loadSettled(filepath.Join(dir, KeyFileName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("seal key %s: %w", filepath.Join(dir, KeyFileName), err)
	}
	return k, err
}

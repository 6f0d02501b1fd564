package verify

import (
	"errors"
	"fmt"
	"time"

	"github.com/containerd/nri/pkg/api"

	"github.com/hyperaccel/lpu-node/internal/dracheckpoint"
)

// DefaultClaimWait is how long CreateContainer waits, at most, for lpu-dra
// to record a pod that joined a prepared claim. The kubelet does not
// announce such a pod to the driver; lpu-dra learns of it from its pod
// watch, normally long before the pod's first container, so the wait only
// covers a race. It stays well under the runtimes' NRI request timeout
// (2 s by default), and a pod still missing after it is refused: the
// kubelet retries the container with backoff.
const DefaultClaimWait = time.Second

// claimPoll is how often the checkpoint is re-read while waiting.
const claimPoll = 50 * time.Millisecond

func claimWait(d time.Duration) time.Duration {
	switch {
	case d == 0:
		return DefaultClaimWait
	case d < 0:
		return 0
	}
	return d
}

// awaitClaimLPUs is claimLPUs for CreateContainer: a claim that is
// prepared but not reserved for the pod yet (dracheckpoint.ErrNotReserved)
// is re-read until claimWait passes, then refused. Any other answer is
// final at once; so is every answer outside CreateContainer (the audit
// reads the checkpoint as it is).
func (v *Verifier) awaitClaimLPUs(pod *api.PodSandbox, claims []string) ([]string, error) {
	deadline := time.Now().Add(v.claimWait)
	for tries := 1; ; tries++ {
		ids, err := v.claimLPUs(pod, claims)
		if err == nil && tries > 1 {
			v.log.Info("lpu-dra recorded the pod in its claims while CreateContainer waited",
				"namespace", pod.GetNamespace(), "pod", pod.GetName(), "uid", pod.GetUid(), "reads", tries)
		}
		if err == nil || !errors.Is(err, dracheckpoint.ErrNotReserved) || !time.Now().Add(claimPoll).Before(deadline) {
			return ids, err
		}
		time.Sleep(claimPoll)
	}
}

// claimLPUs returns the LPUs of the claims when lpu-dra prepared every one
// of them for the pod, else why not.
func (v *Verifier) claimLPUs(pod *api.PodSandbox, claims []string) ([]string, error) {
	if v.claims == nil {
		return nil, fmt.Errorf("container has lpu-dra claim devices %v but this lpu-nri cannot verify claims", claims)
	}
	return v.claims(pod.GetUid(), claims)
}

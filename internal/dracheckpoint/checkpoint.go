package dracheckpoint

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/hyperaccel/lpu-node/internal/atomicfile"
	"github.com/hyperaccel/lpu-node/internal/statedir"
	"github.com/hyperaccel/lpu-node/pkg/device"
)

// FileName is the checkpoint's name in the state directory.
const FileName = "dra-checkpoint.json"

// Version is the format this package writes and reads.
const Version = "lpu.hyperaccel.ai/dra-checkpoint/v1"

// maxSize bounds what Load reads: 32 devices per claim, a few thousand
// claims at most on one node.
const maxSize = 16 << 20

// Device is one allocated device of a claim.
type Device struct {
	Request string `json:"request"` // request (or request/subrequest) name
	Pool    string `json:"pool"`
	Device  string `json:"device"` // device name in the pool
}

// Claim is one prepared claim.
type Claim struct {
	UID       string   `json:"uid"`
	Namespace string   `json:"namespace"`
	Name      string   `json:"name"`
	Devices   []Device `json:"devices"`
	LPUs      []string `json:"lpus"`        // every LPU of the claim, ring order
	CDIDevice string   `json:"cdiDevice"`   // fully qualified CDI device ID
	SpecName  string   `json:"cdiSpecName"` // file name of its spec in the CDI dir
	// Pods are the UIDs of the pods the claim is reserved for on the
	// apiserver (its status.reservedFor, kept current by lpu-dra's
	// reservation watcher): lpu-nri admits the claim's CDI device only for
	// them.
	Pods []string `json:"pods,omitempty"`
	// AdminAccess marks a claim whose devices were allocated with
	// adminAccess: it gets the device nodes but holds nothing, so it never
	// blocks a tenant's claim on the same LPUs, nor they it. Absent in
	// checkpoints written before it existed: those claims are tenants.
	AdminAccess bool `json:"adminAccess,omitempty"`
}

// State is the checkpoint's content: prepared claims by UID.
type State struct {
	Claims map[string]Claim
}

type file struct {
	Version string  `json:"version"`
	Claims  []Claim `json:"claims"`
}

// Held returns every LPU a prepared tenant claim holds (admin claims hold
// nothing).
func (s *State) Held() []string {
	var out []string
	for _, c := range s.Claims {
		if !c.AdminAccess {
			out = append(out, c.LPUs...)
		}
	}
	slices.Sort(out)
	return out
}

// Holder returns the UID of the tenant claim holding the LPU id, "" when
// none.
func (s *State) Holder(id string) string {
	for uid, c := range s.Claims {
		if !c.AdminAccess && slices.Contains(c.LPUs, id) {
			return uid
		}
	}
	return ""
}

// ErrNotReserved is wrapped by PodLPUs' error for a claim that is prepared
// but not (yet) reserved for the pod: lpu-dra may still be writing the pod
// in, so lpu-nri retries briefly on it and on nothing else.
var ErrNotReserved = errors.New("the pod is not in the claim's reservedFor")

// PodLPUs verifies that every claim UID is prepared in the checkpoint in
// dir for the pod podUID (the error names the first claim that is not) and
// returns the LPUs they hold, claim by claim in ring order, each once. lpu-nri calls it for a
// container whose CDI devices name claims: those LPUs are the container's
// verified allocation.
func PodLPUs(dir, podUID string, claimUIDs []string) ([]string, error) {
	s, err := Load(dir)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, uid := range claimUIDs {
		c, ok := s.Claims[uid]
		if !ok {
			return nil, fmt.Errorf("claim %s is not prepared by lpu-dra on this node", uid)
		}
		if podUID == "" || !slices.Contains(c.Pods, podUID) {
			return nil, fmt.Errorf("claim %s/%s (%s) was not prepared for pod %s: %w", c.Namespace, c.Name, uid, podUID, ErrNotReserved)
		}
		for _, id := range c.LPUs {
			if !slices.Contains(ids, id) {
				ids = append(ids, id)
			}
		}
	}
	return ids, nil
}

// Parse decodes and checks a checkpoint. Every error names the version the
// data declares ("unreadable" when not even that decodes), so a downgrade
// that meets a newer checkpoint says so.
func Parse(data []byte) (*State, error) {
	s, err := parse(data)
	if err != nil {
		return nil, fmt.Errorf("version %s: %w", foundVersion(data), err)
	}
	return s, nil
}

// foundVersion is the quoted version field of data, or "unreadable".
func foundVersion(data []byte) string {
	var v struct {
		Version *string `json:"version"`
	}
	if json.Unmarshal(data, &v) != nil || v.Version == nil {
		return "unreadable"
	}
	return strconv.Quote(*v.Version)
}

func parse(data []byte) (*State, error) {
	var f file
	if err := json.Unmarshal(data, &struct {
		Version *string `json:"version"`
	}{Version: &f.Version}); err == nil && f.Version != Version {
		// Checked before the strict decode: a newer format may carry fields
		// this one does not know, and the version is the clearer error.
		return nil, fmt.Errorf("this lpu-dra reads only %q (a checkpoint of a newer release? a downgrade cannot read it)", Version)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("decode: trailing data after the checkpoint")
	}
	if f.Version != Version {
		return nil, fmt.Errorf("this lpu-dra reads only %q", Version)
	}
	s := &State{Claims: make(map[string]Claim, len(f.Claims))}
	owner := map[string]string{}
	for i, c := range f.Claims {
		if c.UID == "" {
			return nil, fmt.Errorf("claim %d: empty uid", i)
		}
		if _, dup := s.Claims[c.UID]; dup {
			return nil, fmt.Errorf("claim %s listed twice", c.UID)
		}
		if err := checkClaim(c, owner); err != nil {
			return nil, err
		}
		if len(c.Pods) == 0 {
			c.Pods = nil // "pods": [] and no pods are the same state
		}
		s.Claims[c.UID] = c
	}
	return s, nil
}

// checkClaim checks one claim's devices, LPUs and CDI names; owner maps
// each LPU seen so far to its claim, so no LPU is held twice.
func checkClaim(c Claim, owner map[string]string) error {
	if len(c.LPUs) == 0 || len(c.Devices) == 0 {
		return fmt.Errorf("claim %s: no devices or LPUs", c.UID)
	}
	for _, id := range c.LPUs {
		if _, err := device.ParseID(id); err != nil {
			return fmt.Errorf("claim %s: %w", c.UID, err)
		}
		if c.AdminAccess {
			continue // admin claims share LPUs with tenants and each other
		}
		if prev, ok := owner[id]; ok {
			return fmt.Errorf("claim %s: %s is also held by claim %s", c.UID, id, prev)
		}
		owner[id] = c.UID
	}
	for j, d := range c.Devices {
		if d.Pool == "" || d.Device == "" {
			return fmt.Errorf("claim %s device %d: empty pool or device name", c.UID, j)
		}
	}
	if c.CDIDevice == "" || c.SpecName == "" || c.SpecName != filepath.Base(c.SpecName) || c.SpecName == "." || c.SpecName == ".." {
		return fmt.Errorf("claim %s: bad cdi device %q or spec name %q", c.UID, c.CDIDevice, c.SpecName)
	}
	return nil
}

// Marshal encodes s, claims sorted by UID so equal states give equal bytes.
func (s *State) Marshal() ([]byte, error) {
	f := file{Version: Version, Claims: make([]Claim, 0, len(s.Claims))}
	for _, c := range s.Claims {
		f.Claims = append(f.Claims, c)
	}
	slices.SortFunc(f.Claims, func(a, b Claim) int {
		switch {
		case a.UID < b.UID:
			return -1
		case a.UID > b.UID:
			return 1
		}
		return 0
	})
	return json.MarshalIndent(f, "", "  ")
}

// Load reads dir/FileName; a missing file is an empty state. The file and
// the directory get the seal key's checks (statedir): a checkpoint another
// uid could have written, or a directory others can write, is an error.
func Load(dir string) (*State, error) {
	path := filepath.Join(dir, FileName)
	f, err := statedir.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return &State{Claims: map[string]Claim{}}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read checkpoint %s: %w", path, err)
	}
	defer f.Close()
	if _, err := statedir.Check(dir); err != nil {
		return nil, fmt.Errorf("read checkpoint %s: %w", path, err)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxSize+1))
	if err != nil {
		return nil, fmt.Errorf("read checkpoint %s: %w", path, err)
	}
	if len(data) > maxSize {
		return nil, fmt.Errorf("checkpoint %s: larger than %d bytes", path, maxSize)
	}
	s, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	return s, nil
}

// Save writes s as dir/FileName through atomicfile (mode 0600, the
// daemon's uid and group: what Load's checks demand): the old checkpoint
// or the new one, never a mix, and durable once Save returns.
func Save(dir string, s *State) error {
	data, err := s.Marshal()
	if err != nil {
		return fmt.Errorf("encode checkpoint: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create state dir %s: %w", dir, err)
	}
	resolved, err := statedir.Check(dir)
	if err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	path := filepath.Join(resolved, FileName)
	if err := atomicfile.Write(path, data, atomicfile.WithMode(0o600), atomicfile.WithOwner(os.Geteuid(), os.Getegid())); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}

// Clone returns a copy of s that shares nothing with it.
func (s *State) Clone() *State {
	out := &State{Claims: make(map[string]Claim, len(s.Claims))}
	for uid, c := range s.Claims {
		c.Devices = slices.Clone(c.Devices)
		c.LPUs = slices.Clone(c.LPUs)
		c.Pods = slices.Clone(c.Pods)
		out.Claims[uid] = c
	}
	return out
}

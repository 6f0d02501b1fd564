// Package claimstatus is the driver-specific data lpu-dra writes into a
// ResourceClaim's status.devices (one entry per allocated arc), so that
// `kubectl get resourceclaim -o yaml` and `kubectl lpu pods` show what a
// pod got: the LPUs in ring order, the arc and the device nodes.
package claimstatus

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// MaxBytes is the API server's limit on an entry's data (10 Ki).
const MaxBytes = 10 * 1024

// Data is the entry of one allocated arc.
type Data struct {
	// LPUs are the arc's LPU IDs in ring order, starting at Start.
	LPUs []string `json:"lpus"`
	// Ring, Start and Size name the arc (its device name says the same).
	Ring  int `json:"ring"`
	Start int `json:"start"`
	Size  int `json:"size"`
	// DeviceNodes are the device node paths the container gets for the
	// arc's LPUs, in the order of LPUs.
	DeviceNodes []string `json:"deviceNodes,omitempty"`
}

// Marshal encodes d, leaving DeviceNodes out when the entry would exceed
// MaxBytes (a ring of hundreds of LPUs): the LPUs name them too.
func (d Data) Marshal() ([]byte, error) {
	if err := d.check(); err != nil {
		return nil, err
	}
	b, err := json.Marshal(d)
	if err != nil {
		return nil, fmt.Errorf("encode claim status: %w", err)
	}
	if len(b) <= MaxBytes {
		return b, nil
	}
	d.DeviceNodes = nil
	if b, err = json.Marshal(d); err != nil {
		return nil, fmt.Errorf("encode claim status: %w", err)
	}
	if len(b) > MaxBytes {
		return nil, fmt.Errorf("claim status of %d LPUs is %d bytes, over the API's %d", len(d.LPUs), len(b), MaxBytes)
	}
	return b, nil
}

// Parse decodes an entry's data, refusing unknown fields and an entry
// whose LPUs do not match its size: a reader must not show a half-read
// allocation as the pod's.
func Parse(raw []byte) (Data, error) {
	if len(raw) > MaxBytes {
		return Data{}, fmt.Errorf("claim status: %d bytes, over %d", len(raw), MaxBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var d Data
	if err := dec.Decode(&d); err != nil {
		return Data{}, fmt.Errorf("decode claim status: %w", err)
	}
	if dec.More() {
		return Data{}, errors.New("decode claim status: trailing data")
	}
	if err := d.check(); err != nil {
		return Data{}, err
	}
	return d, nil
}

func (d Data) check() error {
	switch {
	case d.Ring < 0 || d.Start < 0 || d.Size <= 0:
		return fmt.Errorf("claim status: bad arc ring %d start %d size %d", d.Ring, d.Start, d.Size)
	case len(d.LPUs) != d.Size:
		return fmt.Errorf("claim status: %d LPUs for an arc of size %d", len(d.LPUs), d.Size)
	case len(d.DeviceNodes) > 0 && len(d.DeviceNodes) < len(d.LPUs):
		return fmt.Errorf("claim status: %d device nodes for %d LPUs", len(d.DeviceNodes), len(d.LPUs))
	}
	for _, id := range d.LPUs {
		if id == "" {
			return errors.New("claim status: empty LPU ID")
		}
	}
	return nil
}

package config

import (
	"encoding/json"
	"fmt"
	"time"
)

// MarshalJSON writes the duration as a Go duration string, "5s".
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.Duration.String()) }

// UnmarshalJSON reads a Go duration string such as "5s" or "100ms".
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration %s: want a string like \"5s\"", b)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration %q: want a string like \"5s\"", s)
	}
	d.Duration = v
	return nil
}

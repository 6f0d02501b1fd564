package device

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
)

// Telemetry attribute files in /sys/class/lpu/lpuN (units in the names, as
// hwmon does: integers where the kernel would use them).
const (
	AttrUtilization = "utilization_percent"      // decimal 0..100, fraction allowed ("37.5")
	AttrMemoryUsed  = "memory_used_bytes"        // unsigned integer
	AttrMemoryTotal = "memory_total_bytes"       // unsigned integer
	AttrTemperature = "temperature_millicelsius" // integer, may be negative
	AttrPower       = "power_microwatts"         // unsigned integer
)

// telemetry reads the telemetry files of /sys/class/lpu/<id>.
func (b *lpuBackend) telemetry(id string) (Telemetry, error) {
	var t Telemetry
	dir := ClassDir + "/" + id
	if _, err := os.Stat(b.under(dir)); err != nil {
		return t, fmt.Errorf("telemetry of %s: %s", id, describeErr("stat", dir, err))
	}
	var errs []error
	read := func(name string, parse func(string) error) {
		host := hostAttr(id, name)
		v, err := readAttr(b.under(host))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			t.Missing = append(t.Missing, name)
		case err != nil:
			errs = append(errs, errors.New(describeErr("read", host, err)))
		default:
			if err := parse(v); err != nil {
				errs = append(errs, fmt.Errorf("%s: value %q: %w", host, clip(v), err))
			}
		}
	}
	read(AttrUtilization, func(v string) error {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || !(f >= 0 && f <= 100) { // also rejects NaN
			return errors.New("want a number from 0 to 100")
		}
		t.UtilizationPercent = f
		return nil
	})
	read(AttrMemoryUsed, func(v string) (err error) {
		t.MemoryUsedBytes, err = parseUint(v)
		return err
	})
	read(AttrMemoryTotal, func(v string) (err error) {
		t.MemoryTotalBytes, err = parseUint(v)
		return err
	})
	read(AttrTemperature, func(v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < -273150 || n > 1000000 {
			return errors.New("want integer millidegrees Celsius from -273150 to 1000000")
		}
		t.TemperatureCelsius = float64(n) / 1000
		return nil
	})
	read(AttrPower, func(v string) error {
		n, err := parseUint(v)
		if err != nil {
			return err
		}
		t.PowerWatts = float64(n) / 1e6
		return nil
	})
	return t, errors.Join(errs...)
}

// parseUint parses an unsigned decimal integer.
func parseUint(v string) (uint64, error) {
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, errors.New("want an unsigned integer")
	}
	return n, nil
}

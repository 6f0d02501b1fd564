package device

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"sync"
	"syscall"
	"unicode"
)

// MaxAttrBytes bounds every sysfs attribute read. The kernel never returns
// more than a page for one attribute; anything larger is not an attribute.
const MaxAttrBytes = 4096

// Limits of a Linux device number (dev_t: 12-bit major, 20-bit minor).
const (
	MaxMajor = 1<<12 - 1
	MaxMinor = 1<<20 - 1
)

// errTooLarge is returned (wrapped) for files over their read bound.
var errTooLarge = errors.New("file too large")

// errNotRegular is returned (wrapped) for paths that are not regular files.
var errNotRegular = errors.New("not a regular file")

// openRegular opens path for reading if it is a regular file. A FIFO or
// device in its place is refused without blocking (opened non-blocking,
// checked with fstat before any read).
func openRegular(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if t := fi.Mode().Type(); t != 0 {
		f.Close()
		switch {
		case t&fs.ModeDir != 0:
			return nil, fmt.Errorf("%w: is a directory", errNotRegular)
		case t&fs.ModeNamedPipe != 0:
			return nil, fmt.Errorf("%w: is a named pipe", errNotRegular)
		case t&fs.ModeDevice != 0:
			return nil, fmt.Errorf("%w: is a device", errNotRegular)
		default:
			return nil, errNotRegular
		}
	}
	return f, nil
}

// readBounded reads at most limit bytes of the regular file at path; a longer
// file is an error.
func readBounded(path string, limit int64) ([]byte, error) {
	f, err := openRegular(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%w: more than %d bytes", errTooLarge, limit)
	}
	return b, nil
}

// attrBufs recycles the read buffers of readAttr.
var attrBufs = sync.Pool{New: func() any { return new([MaxAttrBytes + 1]byte) }}

// readAttr reads one sysfs attribute (at most MaxAttrBytes) and trims
// surrounding whitespace.
func readAttr(path string) (string, error) {
	f, err := openRegular(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	buf := attrBufs.Get().(*[MaxAttrBytes + 1]byte)
	defer attrBufs.Put(buf)
	n, err := io.ReadFull(f, buf[:])
	switch {
	case err == nil:
		return "", fmt.Errorf("%w: more than %d bytes", errTooLarge, MaxAttrBytes)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return strings.TrimSpace(string(buf[:n])), nil
	default:
		return "", err
	}
}

// describeErr renders a read error for hostPath without leaking the
// discovery root: os errors carry the rooted path, so only their cause is
// kept.
func describeErr(verb, hostPath string, err error) string {
	if errors.Is(err, fs.ErrNotExist) {
		return hostPath + " missing"
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return fmt.Sprintf("%s %s: %v", verb, hostPath, err)
}

// ParseDev parses a sysfs dev attribute, "MAJOR:MINOR" in decimal as the
// kernel prints it: digits only, no sign, no leading zeros, no spaces, major
// at most MaxMajor and minor at most MaxMinor. The caller trims the trailing
// newline.
func ParseDev(s string) (major, minor int64, err error) {
	ma, mi, ok := strings.Cut(s, ":")
	if !ok {
		return 0, 0, fmt.Errorf("dev %q: want MAJOR:MINOR", clip(s))
	}
	major, err = parseDecimal(ma, MaxMajor)
	if err != nil {
		return 0, 0, fmt.Errorf("dev %q: major: %w", clip(s), err)
	}
	minor, err = parseDecimal(mi, MaxMinor)
	if err != nil {
		return 0, 0, fmt.Errorf("dev %q: minor: %w", clip(s), err)
	}
	return major, minor, nil
}

// parseDecimal parses an unsigned decimal as the kernel prints one (no sign,
// no leading zeros) that is at most max.
func parseDecimal(s string, max int64) (int64, error) {
	if s == "" {
		return 0, errors.New("empty")
	}
	if len(s) > 1 && s[0] == '0' {
		return 0, fmt.Errorf("%q has a leading zero", clip(s))
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%q is not a decimal number", clip(s))
		}
		n = n*10 + int64(c-'0')
		if n > max {
			return 0, fmt.Errorf("%q exceeds %d", clip(s), max)
		}
	}
	return n, nil
}

// parseNUMA parses a numa_node attribute: -1 or a node number below 1<<16.
func parseNUMA(s string) (int, error) {
	if s == "-1" {
		return -1, nil
	}
	n, err := parseDecimal(s, 1<<16-1)
	if err != nil {
		return -1, err
	}
	return int(n), nil
}

// clip shortens a value quoted in an error so a garbage file cannot flood
// logs.
func clip(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	return s[:max] + "..."
}

// cleanText keeps a free-text attribute (serial, firmware, model, driver version)
// safe to log and to put into labels and env: printable characters only,
// bounded length.
func cleanText(s string) string {
	const max = 128
	s = strings.Map(func(r rune) rune {
		if r == unicode.ReplacementChar || !unicode.IsPrint(r) {
			return '?'
		}
		return r
	}, s)
	if len(s) > max {
		s = s[:max]
	}
	return strings.ToValidUTF8(s, "?")
}

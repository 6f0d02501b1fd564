package ledger

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strconv"
)

// The write-ahead log, allocations.wal: a file of fixed size walSize,
// written full of zeros and fsynced when it is made, so that recording a
// batch overwrites blocks the file system has already allocated and
// fdatasync has no metadata to commit (no size, no extent change: on ext4
// and XFS no journal commit, only the data block and the disk's cache
// flush). fallocate is not enough: it leaves unwritten extents whose first
// write is a metadata change.
//
// Layout: a header line "lpu-nri allocation wal v1 gen N\n", then one line
// per committed batch, "cccccccc [records as a JSON array]\n" with the
// CRC-32C of the JSON in hex, then zeros. N matches the snapshot's "wal"
// field: a log of an older generation was folded into the snapshot
// already and is ignored.

const (
	// WALName is the write-ahead log in the state directory.
	WALName = "allocations.wal"
	// walSize is the log's fixed size: compactAfter batches of one new ID
	// and one eviction (~200 bytes) fit with room to spare.
	walSize   = 2 << 20
	walMagic  = "lpu-nri allocation wal v1 gen "
	walTmpPat = ".allocations.wal-*.tmp"
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// walHeader is the first line of a log of generation gen.
func walHeader(gen uint64) []byte {
	return []byte(walMagic + strconv.FormatUint(gen, 10) + "\n")
}

// encodeBatch renders recs as one log line.
func encodeBatch(recs []record) ([]byte, error) {
	js, err := json.Marshal(recs)
	if err != nil {
		return nil, fmt.Errorf("allocation ledger: encode: %w", err)
	}
	line := make([]byte, 0, 10+len(js))
	line = fmt.Appendf(line, "%08x ", crc32.Checksum(js, crcTable))
	line = append(line, js...)
	return append(line, '\n'), nil
}

// walContent is what parseWAL read.
type walContent struct {
	gen  uint64
	recs []record // of the intact batches, in order
	end  int      // offset after the last intact batch
	torn bool     // bytes after end that are not zeros: an append cut short
}

// errNotWAL marks a file that does not start with the log's header.
var errNotWAL = errors.New("not an allocation log (bad header)")

// parseWAL reads a log. Batches are read up to the first one that is
// not intact (or the zeros). A damaged batch is a torn append (a crash
// before its fdatasync returned, so no Claim in it returned) only when
// nothing intact follows it: the ledger never writes after a failed
// append without starting a new log, so an intact batch behind a damaged
// one means the file was damaged after the fact, an error.
func parseWAL(data []byte) (walContent, error) {
	var w walContent
	nl := bytes.IndexByte(data, '\n')
	if nl < 0 || !bytes.HasPrefix(data, []byte(walMagic)) {
		return w, errNotWAL
	}
	gen, err := strconv.ParseUint(string(data[len(walMagic):nl]), 10, 64)
	if err != nil || gen == 0 {
		return w, errNotWAL
	}
	w.gen, w.end = gen, nl+1
	for w.end < len(data) && data[w.end] != 0 {
		recs, n, ok := parseBatch(data[w.end:])
		if !ok {
			break
		}
		w.recs = append(w.recs, recs...)
		w.end += n
	}
	rest := data[w.end:]
	if len(bytes.Trim(rest, "\x00")) == 0 {
		return w, nil
	}
	w.torn = true
	for off := 0; off < len(rest); {
		i := bytes.IndexByte(rest[off:], '\n')
		if i < 0 {
			break
		}
		seg := bytes.TrimLeft(rest[off:off+i+1], "\x00")
		if _, _, ok := parseBatch(seg); ok {
			return w, fmt.Errorf("batch at byte %d is damaged but one after it is intact: not a torn append", w.end)
		}
		off += i + 1
	}
	return w, nil
}

// parseBatch reads the batch line at the start of b: its records and
// length, ok false when it is not intact.
func parseBatch(b []byte) (recs []record, n int, ok bool) {
	nl := bytes.IndexByte(b, '\n')
	if nl < 10 || b[8] != ' ' {
		return nil, 0, false
	}
	var sum [4]byte
	if _, err := hex.Decode(sum[:], b[:8]); err != nil {
		return nil, 0, false
	}
	js := b[9:nl]
	want := uint32(sum[0])<<24 | uint32(sum[1])<<16 | uint32(sum[2])<<8 | uint32(sum[3])
	if crc32.Checksum(js, crcTable) != want {
		return nil, 0, false
	}
	if err := json.Unmarshal(js, &recs); err != nil || len(recs) == 0 {
		return nil, 0, false
	}
	for _, r := range recs {
		if r.ID == "" || r.Pod == "" {
			return nil, 0, false
		}
	}
	return recs, nl + 1, true
}

// createWAL makes an empty log of generation gen under a temporary name
// in dir: header, zeros to walSize, fsynced. The caller renames it into
// place.
func createWAL(dir string, gen uint64) (*os.File, error) {
	f, err := os.CreateTemp(dir, walTmpPat)
	if err != nil {
		return nil, fmt.Errorf("allocation ledger: create log: %w", err)
	}
	fail := func(err error) (*os.File, error) {
		f.Close()
		os.Remove(f.Name())
		return nil, fmt.Errorf("allocation ledger: create log %s: %w", f.Name(), err)
	}
	if err := f.Chmod(0o600); err != nil {
		return fail(err)
	}
	if err := f.Chown(os.Geteuid(), os.Getegid()); err != nil {
		return fail(err)
	}
	buf := make([]byte, walSize)
	copy(buf, walHeader(gen))
	if _, err := f.Write(buf); err != nil {
		return fail(err)
	}
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	return f, nil
}

// removeTemps removes logs a crash left under their temporary name.
func removeTemps(dir string) {
	matches, _ := filepath.Glob(filepath.Join(dir, walTmpPat))
	for _, m := range matches {
		os.Remove(m)
	}
}

package workloadcheck

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/hyperaccel/lpu-node/pkg/inject"
)

// Command is the subcommand: lpu-nri check --lpus N.
const Command = "check"

// maxNodesPerLPU bounds the device nodes one LPU brings (Orion: two).
const maxNodesPerLPU = 4

// standard are the /dev entries every container has without LPUs (the OCI
// runtime spec's default devices, the console and the pty/shm/mqueue
// mounts).
var standard = []string{"null", "zero", "full", "random", "urandom", "tty", "console", "ptmx", "pts", "shm", "mqueue", "fd", "stdin", "stdout", "stderr", "core", "termination-log"}

// Main runs the check with its arguments (after "check") and returns the
// exit status: 0 when the container holds what it asked for, 1 when not,
// 2 on bad arguments. The report goes to out, one line per finding.
func Main(args []string, getenv func(string) string, out io.Writer) int {
	fl := flag.NewFlagSet("lpu-nri check", flag.ContinueOnError)
	fl.SetOutput(out)
	lpus := fl.Int("lpus", 1, "the `N` LPUs the container asked for")
	dev := fl.String("dev", "/dev", "the container's device `DIR`")
	if err := fl.Parse(args); err != nil {
		return 2
	}
	if fl.NArg() > 0 || *lpus < 1 {
		fmt.Fprintf(out, "lpu-nri check: --lpus must be at least 1 and no arguments follow (got --lpus %d, %q)\n", *lpus, fl.Args())
		return 2
	}
	r := Run(*lpus, *dev, getenv)
	for _, l := range r.Lines {
		fmt.Fprintln(out, l)
	}
	if r.Failed {
		fmt.Fprintf(out, "FAIL: the container does not hold the %d LPU(s) it asked for\n", *lpus)
		return 1
	}
	fmt.Fprintf(out, "PASS: %d LPU(s) granted and openable\n", *lpus)
	return 0
}

// Report is one check's findings.
type Report struct {
	Lines  []string // "ok - ..." or "not ok - ..."
	Failed bool
}

func (r *Report) add(ok bool, format string, args ...any) {
	prefix := "ok - "
	if !ok {
		prefix, r.Failed = "not ok - ", true
	}
	r.Lines = append(r.Lines, prefix+fmt.Sprintf(format, args...))
}

// Run checks a container that asked for want LPUs, with /dev at dev.
func Run(want int, dev string, getenv func(string) string) Report {
	var r Report
	num := getenv(inject.EnvNumDevices)
	r.add(num == strconv.Itoa(want), "%s=%q (want %d)", inject.EnvNumDevices, num, want)
	visible := getenv(inject.EnvVisibleDevices)
	idx, err := indices(visible)
	r.add(err == nil && len(idx) == want, "%s=%q names %d distinct LPU(s) (want %d)%s", inject.EnvVisibleDevices, visible, len(idx), want, errText(err))
	nodes, err := injected(dev)
	if err != nil {
		r.add(false, "list %s: %v", dev, err)
		return r
	}
	// an LPU has one node or more (Orion: render and management node)
	r.add(len(nodes) >= want, "%d injected device node(s) under %s (want at least %d): %s", len(nodes), dev, want, strings.Join(nodes, " "))
	if len(nodes) > maxNodesPerLPU*want {
		// a host's /dev or a privileged container's: opening what it holds
		// (a watchdog arms on open) is not this check's business
		r.add(false, "%s holds more device nodes than %d LPU(s) have: run the check in an unprivileged container that asked for them; nothing opened", dev, want)
		return r
	}
	for _, n := range nodes {
		ok, how := open(n)
		r.add(ok, "open %s: %s", n, how)
	}
	return r
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return ": " + err.Error()
}

// indices parses LPU_VISIBLE_DEVICES ("7,0,1"): non-negative integers,
// each once.
func indices(v string) ([]int, error) {
	if v == "" || v == inject.VisibleNone {
		return nil, errors.New("no LPU visible")
	}
	var out []int
	for f := range strings.SplitSeq(v, ",") {
		i, err := strconv.Atoi(f)
		if err != nil || i < 0 {
			return out, fmt.Errorf("%q is not an LPU index", f)
		}
		if slices.Contains(out, i) {
			return out, fmt.Errorf("index %d listed twice", i)
		}
		out = append(out, i)
	}
	return out, nil
}

// injected lists the character devices under dev that are not standard,
// sorted.
func injected(dev string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(dev, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dev, path)
		if rel == "." {
			return nil
		}
		if top, _, _ := strings.Cut(rel, string(filepath.Separator)); slices.Contains(standard, top) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Type()&fs.ModeCharDevice != 0 {
			out = append(out, path)
		}
		return nil
	})
	return out, err
}

// open opens a device node read-only and closes it again: what the device
// cgroup decides. ok is false only when the open was refused before any
// driver ran (permission) or the node cannot be opened at all.
func open(path string) (ok bool, how string) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	switch {
	case err == nil:
		f.Close()
		return true, "opened"
	case errors.Is(err, syscall.ENXIO), errors.Is(err, syscall.ENODEV):
		return true, "allowed by the device cgroup; no driver serves it (no LPU driver on this host)"
	case errors.Is(err, syscall.EBUSY):
		return true, "allowed by the device cgroup; the driver says it is busy"
	case errors.Is(err, syscall.EPERM), errors.Is(err, syscall.EACCES):
		return false, "refused (the device cgroup does not grant it to this container): " + err.Error()
	default:
		return false, err.Error()
	}
}

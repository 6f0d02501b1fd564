package guard

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
)

// Main runs the hook with its arguments (after "guard"): it returns the
// exit status, 0 only for a container lpu-nri verified, and says why on
// stderr otherwise (runc shows it in the container's start error).
func Main(args []string, stdin io.Reader, stderr io.Writer) int {
	fs := flag.NewFlagSet("lpu-nri guard", flag.ContinueOnError)
	fs.SetOutput(stderr)
	stateDir := fs.String("state-dir", "", "the daemons' state `DIR` holding the seal key")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	err := validArgs(*stateDir, fs.Args())
	if err == nil {
		err = Check(stdin, *stateDir)
	}
	if err != nil {
		fmt.Fprintf(stderr, "lpu-nri guard: refusing to start the container: %v\n", err)
		return 1
	}
	return 0
}

func validArgs(stateDir string, rest []string) error {
	switch {
	case len(rest) > 0:
		return fmt.Errorf("unexpected arguments %q", rest)
	case stateDir == "":
		return errors.New("--state-dir is required")
	case !filepath.IsAbs(stateDir):
		return fmt.Errorf("--state-dir %q is not absolute", stateDir)
	}
	return nil
}

package startup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/hyperaccel/lpu-node/config"
	"github.com/hyperaccel/lpu-node/internal/cmdline"
)

// Program is a daemon as its main sees it.
type Program struct {
	Name    string          // command name, as in "lpu-nri"
	Version string          // build version
	Help    func(io.Writer) // writes the command's help text
	// Stdout and Stderr default to os.Stdout and os.Stderr; Stderr also
	// receives the logs.
	Stdout, Stderr io.Writer
	// LookupEnv reads the flags' twins and LPU_LOG_*; nil means
	// os.LookupEnv.
	LookupEnv func(string) (string, bool)
}

// Started is what Start hands the daemon: the command the command line
// chose, the config with the flags laid over it, and the logger.
type Started struct {
	Command *cmdline.Command
	Config  *config.Config
	Log     *slog.Logger
}

func (p Program) stdout() io.Writer {
	if p.Stdout == nil {
		return os.Stdout
	}
	return p.Stdout
}

func (p Program) stderr() io.Writer {
	if p.Stderr == nil {
		return os.Stderr
	}
	return p.Stderr
}

func (p Program) getenv(k string) string {
	look := p.LookupEnv
	if look == nil {
		look = os.LookupEnv
	}
	v, _ := look(k)
	return v
}

// Start installs a logger from LPU_LOG_LEVEL and LPU_LOG_FORMAT as slog's
// default (so errors before the config is loaded follow them), parses args
// (without the program name) against cmds (cmdline.Parse; the first is the
// program's own command), answers --help and --version on Stdout, loads
// the config file named by flags.ConfigFile, lays the given flags over it
// and installs the configured logger. It returns nil and no error when
// there is nothing to run (help or version printed). A bad command line
// is one error ending in "see --help".
func (p Program) Start(args []string, flags *Flags, cmds ...*cmdline.Command) (*Started, error) {
	early, _ := config.NewLogger(config.Log{}, p.stderr(), p.getenv)
	slog.SetDefault(early)
	look := p.LookupEnv
	if look == nil {
		look = os.LookupEnv
	}
	cmd, err := cmdline.Parse(args, look, cmds...)
	switch {
	case errors.Is(err, cmdline.ErrHelp):
		if p.Help != nil {
			p.Help(p.stdout())
		}
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("%w; see --help", err)
	case flags.Version:
		_, err := fmt.Fprintln(p.stdout(), p.Name, p.Version)
		return nil, err
	}
	cfg, err := config.Load(flags.ConfigFile)
	if err != nil {
		return nil, err
	}
	if err := cmd.Apply(cfg); err != nil {
		return nil, err
	}
	log, warnings := config.NewLogger(cfg.Log, p.stderr(), p.getenv)
	slog.SetDefault(log)
	for _, w := range warnings {
		log.Warn(w)
	}
	return &Started{Command: cmd, Config: cfg, Log: log}, nil
}

// LogError logs err through slog's default logger, one record per line of
// its message, so several config errors read one per line.
func LogError(err error) {
	for line := range strings.SplitSeq(err.Error(), "\n") {
		slog.Error("exiting", "err", line)
	}
}

// Logger returns log, or a logger that discards everything when log is
// nil: the one meaning of a nil logger across the daemons' packages.
func Logger(log *slog.Logger) *slog.Logger {
	if log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return log
}

// Context is the daemons' run context: cancelled on SIGINT or SIGTERM.
func Context() (context.Context, context.CancelFunc) {
	return signalContext()
}

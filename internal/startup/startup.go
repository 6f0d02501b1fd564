package startup

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/hyperaccel/lpu-node/config"
)

// Program is a daemon as its main sees it.
type Program struct {
	Name    string          // command name, as in "lpu-nri"
	Version string          // build version
	Usage   func(io.Writer) // writes the command's help text
	// Stdout and Stderr default to os.Stdout and os.Stderr; Stderr also
	// receives the logs.
	Stdout, Stderr io.Writer
	// Getenv reads LPU_LOG_LEVEL and LPU_LOG_FORMAT; nil means os.Getenv.
	Getenv func(string) string
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

// ParseError answers an error from parsing the command line. For --help
// (flag.ErrHelp) it writes the usage to Stdout and returns nil: the
// program exits 0. For any other error it writes the usage to Stderr and
// returns err.
func (p Program) ParseError(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		p.usage(p.stdout())
		return nil
	}
	p.usage(p.stderr())
	return err
}

func (p Program) usage(w io.Writer) {
	if p.Usage != nil {
		p.Usage(w)
	}
}

// PrintVersion writes "<name> <version>" to Stdout.
func (p Program) PrintVersion() error {
	_, err := fmt.Fprintln(p.stdout(), p.Name, p.Version)
	return err
}

// Config loads the config file (built-in defaults when file is ""), calls
// apply to lay the command line over it, and installs the configured
// logger, writing to Stderr, as slog's default. The logger's warnings
// (LPU_LOG_* values it ignored) are logged through it. Errors from loading
// and from apply are returned as they are.
func (p Program) Config(file string, apply func(*config.Config) error) (*config.Config, *slog.Logger, error) {
	cfg, err := config.Load(file)
	if err != nil {
		return nil, nil, err
	}
	if apply != nil {
		if err := apply(cfg); err != nil {
			return nil, nil, err
		}
	}
	getenv := p.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	log, warnings := config.NewLogger(cfg.Log, p.stderr(), getenv)
	slog.SetDefault(log)
	for _, w := range warnings {
		log.Warn(w)
	}
	return cfg, log, nil
}

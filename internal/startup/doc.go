// Package startup is the common start of the lpu-node daemons: the flags
// they share, declared once (Flags.Declare), parsing the command line
// (internal/cmdline), --help and --version, the config file with the
// flags laid over it, the logger, and tracing failing open (Tracing). What
// a daemon then runs stays in its own packages.
//
// A daemon's package declares its flags on a cmdline.Command (the shared
// ones through Flags.Declare, embedded in its Options); its main then
// starts, as lpu-dra's does:
//
//	var opts daemon.Options
//	p := startup.Program{Name: "lpu-dra", Version: version, Help: daemon.Usage}
//	s, err := p.Start(os.Args[1:], &opts.Flags, daemon.Command(&opts))
//	if s == nil {
//		return err // nil after --help or --version
//	}
//	ctx, stop := startup.Context()
//	defer stop()
//	return daemon.Run(ctx, daemon.Params{Config: s.Config, Options: &opts, Logger: s.Log, Version: version})
//
// A logger that is nil means "log nothing" in every package (Logger).
package startup

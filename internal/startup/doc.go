// Package startup is the common start of the lpu-node daemons' main: it
// answers --help and --version, loads the config file, lays the command
// line over it (each daemon's own cli package does that part), installs
// the configured logger, and starts tracing failing open (Tracing). What a
// daemon then runs stays in its own packages.
//
//	p := startup.Program{Name: "lpu-nri", Version: version, Usage: cli.Usage}
//	opts, err := cli.Parse(os.Args[1:], os.LookupEnv)
//	if err != nil {
//		return p.ParseError(err) // nil for --help
//	}
//	if opts.Version {
//		return p.PrintVersion()
//	}
//	cfg, log, err := p.Config(opts.ConfigFile, opts.Apply)
//	...
//	tracer, stop := startup.Tracing(ctx, cfg.Tracing, "lpu-nri", version, log)
//	defer stop()
package startup

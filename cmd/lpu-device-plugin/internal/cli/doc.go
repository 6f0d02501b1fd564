// Package cli reads lpu-device-plugin's command line: flags, their
// environment twins (LPU_ROOT for --root, ...) and how they override the
// config file. Precedence: flag > environment > config file > default.
//
//	opts, err := cli.Parse(os.Args[1:], os.LookupEnv)
//	cfg, err := config.Load(opts.ConfigFile)
//	err = opts.Apply(cfg)
package cli

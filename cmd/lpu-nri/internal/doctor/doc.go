// Package doctor checks a node for what lpu-nri and the device plugin need
// and reports each check in plain words, one line each, OK or FAIL.
//
//	results := doctor.Run(ctx, doctor.Params{Root: "/", StateDir: "/var/lib/lpu", ...})
//	if doctor.Print(os.Stdout, results) { os.Exit(1) }
package doctor

// Package nritest runs the real runtime side of NRI (the containerd/nri
// adaptation package, what containerd and CRI-O embed) in-process over a real
// unix socket, for tests of lpu-nri, the way NRI's own test suite does.
//
//	rt := nritest.New(t)
//	rt.Start(t)
//	go runner.Run(ctx)            // the plugin under test dials rt.Socket
//	rt.WaitPlugins(t, 1)
//	rsp, err := rt.CreateContainer(ctx, pod, ctr)
package nritest
